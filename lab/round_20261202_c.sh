#!/usr/bin/env bash
# W4A8 round c (2026-12-02).  The builds each call uses were made here from variants of the source:
#   A: lab/experiments/h_quant_in_gemm1.patch applied to b64a7e6 (GEMM1's last CTA per work tile
#      quantizes `h` up to kQuantizeHInGemm1MaxRows expert rows; not kept), `moegen build
#      --activations fp8`; generated/_prev: b64a7e6's build.
#   E: b64a7e6 with one-block routing's early-quantize test `2 * T <= kWarps` replaced by
#      `kWarps - T >= N * T` (N = 3, 7, 100) and, for u8, `#pragma unroll 8` in
#      quantize_rows_e4m3_warps, each built with --out generated/_exp/eN[u8].
#   M: b64a7e6 with OneBlockRouting::kMaxTokens = (P::kFp8Activations ? N : ...), N = 4, 8
#      (e27e21b ships N = 8), built with --out generated/_exp/mN.
#   B: e27e21b.
#   T: a27a776 with OneBlockRouting::kMaxTokens = (P::kFp8Activations ? N : ...), N = 1, 2, 4, built
#      with --out generated/_exp/mN: the decode timeline's routing and one bench run at T = 1-8.
#   Q: many-block routing's hidden rows quantized by extra blocks of its grid (2 rows, 4 warps each)
#      instead of by each token's routing warp: the W4A8 GPU tests, then two two-library bench runs
#      of this build against e27e21b's (generated/_prev), once in each order, and the routing's time.
# After `source lab/device_env.sh`:
#   A: `moegen check` of the default W4A8 build; one bench run (BF16 default, this W4A8 build, the
#      previous one in generated/_prev) at T = 1-1024; the same with MOEGEN_H_QUANT=gemm1 at T = 1024
#      and 4096 (is the threshold right?); the decode timeline.
#   E: one-block routing's W4A8 hidden-state quantization: which warps and when (generated/_exp/eN:
#      the idle warps quantize while the others route when idle >= N x tokens, else every warp at the
#      end; u8: eight loads in flight per lane instead of four).  One bench run at T = 1-32 and the
#      routing kernel's time in the timeline.
#   B: the W4A8 GPU tests and the quantizer test (test libraries carried, built here ahead).
# Results in $OUT/results.tgz.     bash lab/round_20261202_c.sh OUT A|B
set -uo pipefail
OUT=$1
R=/tmp/round_c; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R .; }
W4A8=generated/deepseek-v4-flash-w4a8/sm90
PREV=generated/_prev/deepseek-v4-flash-w4a8/sm90
bench() {  # label, tokens, extra env
  env $3 timeout -k 5 200 python3 -m moegen bench --model deepseek-v4-flash --compare "w4a8=$W4A8" \
    --compare "w4a8-prev=$PREV" --tokens $2 --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-$1.json \
    > $R/bench-$1.md 2> $R/bench-$1.log
  cat $R/bench-$1.md; tail -2 $R/bench-$1.log
}
if [ "$2" = A ]; then
  timeout -k 5 150 python3 -m moegen check --model deepseek-v4-flash --activations fp8 \
    --tokens 0,1,3,16,33,255,683,1024,4096 > $R/check.txt 2>&1; echo "check rc $?"; tail -4 $R/check.txt
  pack
  bench a "${TOKENS:-1,4,16,64,256,1024}" MOEGEN_UNUSED=1; pack
  bench a-gemm1 "${GEMM1_TOKENS:-1024,4096}" MOEGEN_H_QUANT=gemm1; pack
  for lib in $W4A8 $PREV; do
    echo "== $lib"; timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 1,4 $lib 2>&1 | grep -v -i warn
  done > $R/timeline.txt
  cat $R/timeline.txt; pack
fi
if [ "$2" = E ]; then
  X=generated/_exp
  timeout -k 5 300 python3 -m moegen bench --model deepseek-v4-flash --compare "e1=$PREV" \
    --compare "e3=$X/e3/deepseek-v4-flash-w4a8/sm90" --compare "e7=$X/e7/deepseek-v4-flash-w4a8/sm90" \
    --compare "e100=$X/e100/deepseek-v4-flash-w4a8/sm90" --compare "e3u8=$X/e3u8/deepseek-v4-flash-w4a8/sm90" \
    --compare "e100u8=$X/e100u8/deepseek-v4-flash-w4a8/sm90" --tokens 1,4,8,16,32 --reps 6 --rounds 2 \
    --warm-seconds 2 --json $R/bench-e.json > $R/bench-e.md 2> $R/bench-e.log
  cat $R/bench-e.md; tail -1 $R/bench-e.log; pack
  for v in e1:$PREV e3:$X/e3/deepseek-v4-flash-w4a8/sm90 e100:$X/e100/deepseek-v4-flash-w4a8/sm90 \
           e100u8:$X/e100u8/deepseek-v4-flash-w4a8/sm90; do
    echo "== ${v%%:*}"; timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 1,4,8,16,32 ${v#*:} 2>&1 | grep -E "^T=|route"
  done > $R/timeline-e.txt
  cat $R/timeline-e.txt; pack
fi
if [ "$2" = M ]; then  # W4A8 routing: one block up to mN tokens (N = 4, 8), many blocks beyond
  X=generated/_exp
  timeout -k 5 300 python3 -m moegen bench --model deepseek-v4-flash --compare "m32=$PREV" \
    --compare "m4=$X/m4/deepseek-v4-flash-w4a8/sm90" --compare "m8=$X/m8/deepseek-v4-flash-w4a8/sm90" \
    --tokens 4,8,16,32,64 --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-m.json > $R/bench-m.md 2> $R/bench-m.log
  cat $R/bench-m.md; tail -1 $R/bench-m.log; pack
  for v in m32:$PREV m4:$X/m4/deepseek-v4-flash-w4a8/sm90 m8:$X/m8/deepseek-v4-flash-w4a8/sm90; do
    echo "== ${v%%:*}"; timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 8,16,32 ${v#*:} 2>&1 | grep -E "^T=|route|zero|gemm1"
  done > $R/timeline-m.txt
  cat $R/timeline-m.txt; pack
fi
if [ "$2" = Q ]; then
  timeout -k 5 150 python3 -m pytest -m gpu tests/test_gpu_w4a8.py tests/test_quantize_gpu.py -q -s -p no:cacheprovider \
    > $R/pytest-w4a8-q.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8-q.log | tail -6
  grep -E "rel L2" $R/pytest-w4a8-q.log > $R/w4a8-errors-q.txt
  pack
  for o in a b; do
    if [ $o = a ]; then D=generated; C=$PREV; L=prev; else D=generated/_prev; C=$W4A8; L=new; fi
    echo "== default from $D, compare $L"
    timeout -k 5 150 python3 -m moegen bench --model deepseek-v4-flash --activations fp8 --out $D --compare $L=$C \
      --tokens 16,64,256,1024,4096 --reps 8 --rounds 4 --warm-seconds 2 --json $R/bench-q-$o.json 2>/dev/null \
      | cut -d'|' -f2-6
    pack
  done
  for lib in $W4A8 $PREV; do
    echo "== $lib"; timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 16,64,1024,4096 $lib 2>&1 | grep -E "^T=|route|zero"
  done > $R/timeline-q.txt
  cat $R/timeline-q.txt; pack
fi
if [ "$2" = T ]; then  # a27a776: W4A8 one-block routing up to N tokens (generated/_exp/mN, N = 1, 2, 4; a27a776: 8)
  X=generated/_exp
  for v in m8:$W4A8 m1:$X/m1/deepseek-v4-flash-w4a8/sm90 m2:$X/m2/deepseek-v4-flash-w4a8/sm90 m4:$X/m4/deepseek-v4-flash-w4a8/sm90; do
    echo "== ${v%%:*}"; timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 1,2,4,8 ${v#*:} 2>&1 | grep -E "^T=|route|zero"
  done > $R/timeline-t.txt
  cat $R/timeline-t.txt; pack
  timeout -k 5 150 python3 -m moegen bench --model deepseek-v4-flash --activations fp8 --compare m1=$X/m1/deepseek-v4-flash-w4a8/sm90 \
    --compare m2=$X/m2/deepseek-v4-flash-w4a8/sm90 --compare m4=$X/m4/deepseek-v4-flash-w4a8/sm90 --tokens 1,2,4,8 \
    --reps 8 --rounds 4 --warm-seconds 2 --json $R/bench-t.json 2>/dev/null | cut -d'|' -f2-6
  pack
fi
if [ "$2" = B ]; then
  timeout -k 5 200 python3 -m pytest -m gpu tests/test_gpu_w4a8.py tests/test_quantize_gpu.py -q -s -p no:cacheprovider \
    > $R/pytest-w4a8.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8.log | tail -12
  grep -E "rel L2" $R/pytest-w4a8.log > $R/w4a8-errors.txt
  pack
  timeout -k 5 150 python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider \
    -k "deepseek-v4-flash and not ep1of8 or grouped-64e" > $R/pytest-bf16.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-bf16.log | tail -6
  pack
  bench b "1,4,16,32,64,256,1024,4096,16384" MOEGEN_UNUSED=1; pack
  timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 1,16,32 $W4A8 2>&1 | grep -v -i warn > $R/timeline-b.txt
  cat $R/timeline-b.txt; pack
fi
