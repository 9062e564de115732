#!/usr/bin/env bash
# Round 2026-12-03 a (eighth session).
#   lab/experiments/gemm2_quantizes_on_load_converter_warp.patch, built here (DeepSeek-V4-Flash and
#   Qwen3-30B-A3B W4A8 and W4A16 default builds, the DeepSeek-V4-Flash W4A8 GPU-test library):
#   V: bit for bit against the quantizer kernel (switch off) in the same build, `moegen check`,
#      compute-sanitizer memcheck;
#   B: the bench (W4A8 against W4A16, both orders, switch on and off, T = 1-8) and the T = 1 and 4
#      timelines.
#   I: the W4A8 batch-invariance GPU test on DeepSeek-V4-Flash with the patch.
#   A: the W4A8 mainloop ablation at T = 4096 and 16384 (lab/ablation.py, built here from HEAD's
#      templates, packed into .carry/ablation): what the widening and the promotion cost.
#   A2: the same for W4A8 and W4A16 at T = 1024, 4096 and 16384 with their tables' picks, the
#      promotion-only variant fixed (.carry/abl8, .carry/abl16).
#   S: W4A8 m128n128k128 with 6 and 8 stages at T = 4096 and 16384 (.carry/ablS6, ablS8: base and
#      stream), beside A2's s4 libraries (.carry/abl8) in the same run.
#   P: W4A8 m128n128k128s4 with the persistent grid's tile loop at 32 K tiles (.carry/ablP:
#      persistent32, which spills 460-492 B, and persistent32+stream), beside .carry/abl8.
#   R: persistent32+onewidth (.carry/ablR: every tile runs the full-width mainloop, which removes the
#      spill): `moegen check`, then timed with the persistent grid and with one CTA per tile, beside abl8.
#   L: lab/experiments/l2_gather_bench.cu: what the SMs read from L2 by 16-byte cp.async row gathers.
# Results in $OUT/results.tgz.     bash lab/round_20261203_a.sh OUT V|B|I|A|A2|S|P|R|L ...
set -uo pipefail
OUT=$1
R=/tmp/round_20261203_a; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R . ; }
# ablate DIR FILE [TIMEOUT]: time the ablation builds packed in .carry/DIR into $R/FILE (runtime warnings
# about the missing dispatch table dropped: the picks fix the kernels) and print the per-GEMM lines.
ablate() {
  timeout -k 5 ${3:-200} python3 lab/ablation.py time .carry/$1 2>&1 | grep -v Warning | \
    grep -v "return MoeLayer\|_warn_once" > $R/$2; echo "ablation $1 rc $?"; grep -E "^==|span|gemm" $R/$2
}
SW=MOEGEN_QUANTIZE_ON_LOAD_MAX_ROWS
for part in "${@:2}"; do
  if [ $part = V ]; then
    for m in deepseek-v4-flash qwen3-30b-a3b; do
      timeout -k 5 100 python3 lab/bitwise_switch.py generated/$m-w4a8/sm90 $m $SW=0 $SW=64 --activations fp8 \
        --tokens 1,2,3,5,8,11,16 > $R/bitwise-$m.txt 2>&1
      echo "bitwise $m rc $?: $(tail -1 $R/bitwise-$m.txt)"; grep -m3 DIFF $R/bitwise-$m.txt
      timeout -k 5 100 python3 -m moegen check --model $m --activations fp8 --tokens 0,1,2,3,8,11,16,64,4100 \
        > $R/check-$m.txt 2>&1; echo "check $m rc $?: $(tail -1 $R/check-$m.txt)"; grep FAIL $R/check-$m.txt | head -3
    done
    pack
    timeout -k 5 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_run.py \
      generated/deepseek-v4-flash-w4a8/sm90 > $R/memcheck.txt 2>&1
    echo "memcheck rc $?: $(grep -E 'ERROR SUMMARY' $R/memcheck.txt | tail -1)"
    pack
  fi
  if [ $part = B ]; then
    for m in deepseek-v4-flash qwen3-30b-a3b; do
      for sw in 64 0; do
        timeout -k 5 100 env $SW=$sw python3 -m moegen bench --model $m --activations fp8 \
          --compare w4a16=generated/$m/sm90 --tokens 1,2,4,8 --reps 10 --rounds 4 --warm-seconds 2 \
          --json $R/bench-$m-sw$sw-a.json 2>/dev/null | cut -d'|' -f2-6
        timeout -k 5 100 env $SW=$sw python3 -m moegen bench --model $m \
          --compare w4a8=generated/$m-w4a8/sm90 --tokens 1,2,4,8 --reps 10 --rounds 4 --warm-seconds 2 \
          --json $R/bench-$m-sw$sw-b.json 2>/dev/null | cut -d'|' -f2-6
        pack
      done
    done
    for sw in 64 0; do
      env $SW=$sw timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 1,4 2>/dev/null | tail -14 \
        > $R/timeline-sw$sw.txt; cat $R/timeline-sw$sw.txt
    done
    pack
  fi
  if [ $part = I ]; then
    timeout -k 5 120 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider \
      -k "batch_invariance and deepseek-v4-flash" > $R/pytest-invariance.log 2>&1
    grep -E "seed|passed|failed|FAILED|Error" $R/pytest-invariance.log | tail -4
    pack
  fi
  if [ $part = A ]; then  # the first run (T = 4096, 16384; its `nopromote` lost the wgmmas to nvcc: a stream)
    timeout -k 5 300 python3 lab/ablation.py time .carry/ablation > $R/ablation.txt 2>&1
    echo "ablation rc $?"; cat $R/ablation.txt
    pack
  fi
  if [ $part = A2 ]; then  # W4A8 and W4A16, T = 1024, 4096, 16384, the default picks (.carry/abl8, .carry/abl16)
    for a in abl8 abl16; do ablate $a ablation-$a.txt 280; pack; done
  fi
  if [ $part = S ]; then  # W4A8 m128n128k128 with 6 and 8 stages (.carry/ablS6, ablS8), full and streaming only
    for a in ablS6 ablS8 abl8; do ablate $a ablation-$a-s.txt; pack; done
  fi
  if [ $part = P ]; then  # W4A8 m128n128k128s4 with the persistent tile loop at 32 K tiles (.carry/ablP), beside abl8
    for a in ablP abl8; do ablate $a ablation-$a-p.txt; pack; done
  fi
  if [ $part = R ]; then  # persistent32+onewidth (.carry/ablR): no spill; its grid persistent and one CTA per tile
    timeout -k 5 150 python3 -m moegen check --model deepseek-v4-flash --activations fp8 \
      --out ".carry/ablR/persistent32+onewidth/generated" --tokens 0,5,700,4100 > $R/check-ablR.txt 2>&1
    echo "check ablR rc $?: $(tail -1 $R/check-ablR.txt)"
    for grid in persistent tiles; do MOEGEN_GRID=$grid ablate ablR ablation-ablR-$grid.txt 100; done
    ablate abl8 ablation-abl8-r.txt
    pack
  fi
  if [ $part = L ]; then
    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a lab/experiments/l2_gather_bench.cu -o /tmp/l2g && \
      timeout -k 5 120 /tmp/l2g > $R/l2_gather.txt 2>&1; echo "l2 bench rc $?"; cat $R/l2_gather.txt
    pack
  fi
done
