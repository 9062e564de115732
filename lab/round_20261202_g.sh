#!/usr/bin/env bash
# Round g (2026-12-02, sixth session).  Built here before the call (default builds unless named):
# DeepSeek-V3 W4A8, the five retuned splits (DeepSeek-V4-Flash and V3 --ep-size 8 --ep-rank 0,
# gpt-oss-120b --tp 2, gpt-oss-20b and its --tp 2), gpt-oss-20b W4A8.
#   N: the quantizer GPU test at every shipped size; DeepSeek-V3's T = 1 token per expert, as drawn
#      and with its hidden row replaced by e4m3 values times a power of two (both quantizers exact);
#      `moegen check` of the five retuned splits;
#   B: gpt-oss-20b W4A8 checked, then benched against its W4A16 build in both orders;
#   A: after 1392fc0 (the reference's per-token scale by IEEE division on CUDA): the quantizer test,
#      DeepSeek-V3's T = 1 tokens over 20 draws (and gpt-oss-20b's), per expert for draws 0 and 4, the
#      W4A8 GPU tests (their libraries carried, generated/_gputest), `moegen check` of DeepSeek-V3 W4A8.
#   Q: W4A8 GEMM2 quantizing its own rows at small T (lab/experiments/gemm2_quantizes_h.patch on 6cc4fac, built
#      into generated/_exp/q2): bit for bit against the default builds (DeepSeek-V4-Flash and Qwen3,
#      at the shipped threshold and with it forced at every T), then benched against them (and W4A16)
#      in both orders at T = 1-8, and at T = 16 and 64 with the threshold raised.
#   P: W4A8 GEMM2 with the persistent tile loop (kPersistent for fp8 too, Qwen3-30B-A3B's 6 K tiles:
#      m128n128k128s6, 168 registers, no spill; built into generated/_exp/p with a user table picking
#      it from T = 1024): `moegen check` (grid forced persistent), then benched against the default
#      build (m128n128k128s4, one CTA per tile) in both orders, and once with the grid forced to tiles.
#   S: with the W4A8 tile loop up to 6 K tiles (uncommitted here): Qwen3-30B-A3B W4A8 retuned at T = 256
#      and from 1024 over 8 candidates (built here, 16 cores), its default build from the new table
#      checked, sass-audited, benched against the previous default build (carried as generated/_head)
#      in both orders, and the Qwen3 W4A8 GPU tests.
#   G: the W4A8 GPU tests and the quantizer test at e09cf2c's templates (every W4A8 variant, carried).
#   T: DeepSeek-V3 W4A8's T = 1 bucket retuned over its decode candidates into configs/dispatch (the
#      shipped pair was compacted and never timed), the other buckets kept by tune itself (dabcba2);
#      the default build from the new table checked at small T.
# Results in $OUT/results.tgz.     bash lab/round_20261202_g.sh OUT N|B|A|Q|P|S|G|T ...
set -uo pipefail
OUT=$1
R=/tmp/round_g; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R . ; }
for part in "${@:2}"; do
  if [ $part = N ]; then
    timeout -k 5 120 python3 -m pytest -m gpu tests/test_quantize_gpu.py -q -s -p no:cacheprovider > $R/pytest-quantize.log 2>&1
    grep -E "seed|passed|failed|FAILED|Error" $R/pytest-quantize.log | tail -4
    for flag in "" --exact-hidden; do
      timeout -k 5 100 python3 lab/diag_w4a8_small_t.py generated/deepseek-v3-w4a8/sm90 deepseek-v3 --per-expert \
        $flag --seeds 0,4 2>&1 | grep -v Warn | tee $R/diag-per-expert$flag.txt
    done
    pack
    for a in "deepseek-v4-flash --ep-size 8 --ep-rank 0" "deepseek-v3 --ep-size 8 --ep-rank 0" "gpt-oss-120b --tp 2" \
             "gpt-oss-20b" "gpt-oss-20b --tp 2"; do
      n=$(echo $a | tr ' ' '_')
      timeout -k 5 100 python3 -m moegen check --model $a --tokens 0,1,3,64,1024,4100 > $R/check-$n.txt 2>&1
      echo "check $a rc $?: $(tail -1 $R/check-$n.txt)"; grep FAIL $R/check-$n.txt | head -3
    done
    pack
  fi
  if [ $part = B ]; then
    timeout -k 5 120 python3 -m moegen check --model gpt-oss-20b --activations fp8 --tokens 0,1,2,3,16,64,300,1024,4100 \
      > $R/check-gpt-oss-20b-w4a8.txt 2>&1; echo "check gpt-oss-20b w4a8 rc $?: $(tail -1 $R/check-gpt-oss-20b-w4a8.txt)"
    grep FAIL $R/check-gpt-oss-20b-w4a8.txt | head -5
    pack
    for o in a b; do
      if [ $o = a ]; then A=""; C="w4a8=generated/gpt-oss-20b-w4a8/sm90"; else A="--activations fp8"; C="w4a16=generated/gpt-oss-20b/sm90"; fi
      timeout -k 5 200 python3 -m moegen bench --model gpt-oss-20b $A --compare $C \
        --tokens 1,4,16,64,256,1024,4096,16384 --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-oss20b-$o.json \
        2>/dev/null | cut -d'|' -f2-6
      pack
    done
  fi
  if [ $part = A ]; then
    timeout -k 5 120 python3 -m pytest -m gpu tests/test_quantize_gpu.py -q -s -p no:cacheprovider > $R/pytest-quantize-a.log 2>&1
    grep -E "passed|failed" $R/pytest-quantize-a.log | tail -1
    seeds=$(seq -s, 0 19)
    for m in deepseek-v3 gpt-oss-20b; do
      timeout -k 5 150 python3 lab/diag_w4a8_small_t.py generated/$m-w4a8/sm90 $m --seeds $seeds 2>&1 | grep -v Warn \
        > $R/diag-t1-$m.txt; echo "diag $m rc $?"; cut -c1-60 $R/diag-t1-$m.txt | head -20
    done
    timeout -k 5 100 python3 lab/diag_w4a8_small_t.py generated/deepseek-v3-w4a8/sm90 deepseek-v3 --per-expert \
      --seeds 0,4 2>&1 | grep -v Warn | tee $R/diag-per-expert-a.txt
    pack
    timeout -k 5 240 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider > $R/pytest-w4a8.log 2>&1
    grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8.log | tail -4
    grep -E "rel L2" $R/pytest-w4a8.log > $R/w4a8-errors.txt
    pack
    timeout -k 5 120 python3 -m moegen check --model deepseek-v3 --activations fp8 --tokens 0,1,2,3,16,64,300,1024,4100 \
      > $R/check-deepseek-v3-w4a8.txt 2>&1; echo "check deepseek-v3 w4a8 rc $?: $(tail -1 $R/check-deepseek-v3-w4a8.txt)"
    pack
  fi
  if [ $part = Q ]; then
    for m in deepseek-v4-flash qwen3-30b-a3b; do
      timeout -k 5 100 python3 lab/bitwise_ab.py generated/$m-w4a8/sm90 generated/_exp/q2/$m-w4a8/sm90 $m \
        --activations fp8 --tokens 1,2,3,4,5,8,37 > $R/bitwise-q2-$m.txt 2>&1
      echo "bitwise $m rc $?: $(tail -1 $R/bitwise-q2-$m.txt)"; grep -m3 DIFF $R/bitwise-q2-$m.txt
      MOEGEN_GEMM2_QUANTIZES_MAX_ROWS=1000000 timeout -k 5 100 python3 lab/bitwise_ab.py generated/$m-w4a8/sm90 \
        generated/_exp/q2/$m-w4a8/sm90 $m --activations fp8 --tokens 1,37,300,2048 > $R/bitwise-q2-all-$m.txt 2>&1
      echo "bitwise (every T) $m rc $?: $(tail -1 $R/bitwise-q2-all-$m.txt)"; grep -m3 DIFF $R/bitwise-q2-all-$m.txt
    done
    pack
    for m in deepseek-v4-flash qwen3-30b-a3b; do
      w16=""; [ -f generated/$m/sm90/manifest.json ] && w16="--compare w4a16=generated/$m/sm90"
      timeout -k 5 150 python3 -m moegen bench --model $m --activations fp8 --compare q2=generated/_exp/q2/$m-w4a8/sm90 \
        $w16 --tokens 1,2,4,8 --reps 10 --rounds 4 --warm-seconds 2 --json $R/bench-q2-$m-a.json 2>/dev/null | cut -d'|' -f2-6
      pack
      timeout -k 5 150 python3 -m moegen bench --model $m --activations fp8 --out generated/_exp/q2 \
        --compare head=generated/$m-w4a8/sm90 $w16 --tokens 1,2,4,8 --reps 10 --rounds 4 --warm-seconds 2 \
        --json $R/bench-q2-$m-b.json 2>/dev/null | cut -d'|' -f2-6
      pack
    done
    MOEGEN_GEMM2_QUANTIZES_MAX_ROWS=1000000 timeout -k 5 150 python3 -m moegen bench --model deepseek-v4-flash \
      --activations fp8 --compare q2=generated/_exp/q2/deepseek-v4-flash-w4a8/sm90 --tokens 16,64 --reps 10 --rounds 4 \
      --warm-seconds 1 --json $R/bench-q2-forced.json 2>/dev/null | cut -d'|' -f2-6
    pack
  fi
  if [ $part = P ]; then
    MOEGEN_GRID=persistent timeout -k 5 120 python3 -m moegen check --model qwen3-30b-a3b --activations fp8 \
      --out generated/_exp/p --tokens 0,1,3,64,1024,4100 > $R/check-p.txt 2>&1
    echo "check p rc $?: $(tail -1 $R/check-p.txt)"; grep FAIL $R/check-p.txt | head -3
    pack
    P=generated/_exp/p/qwen3-30b-a3b-w4a8/sm90 H=generated/qwen3-30b-a3b-w4a8/sm90
    timeout -k 5 150 python3 -m moegen bench --model qwen3-30b-a3b --activations fp8 --compare p=$P \
      --tokens 1024,4096,16384 --reps 10 --rounds 4 --warm-seconds 3 --json $R/bench-p-a.json 2>/dev/null | cut -d'|' -f2-6
    pack
    timeout -k 5 150 python3 -m moegen bench --model qwen3-30b-a3b --activations fp8 --out generated/_exp/p \
      --compare head=$H --tokens 1024,4096,16384 --reps 10 --rounds 4 --warm-seconds 3 --json $R/bench-p-b.json \
      2>/dev/null | cut -d'|' -f2-6
    pack
    MOEGEN_GRID=tiles timeout -k 5 150 python3 -m moegen bench --model qwen3-30b-a3b --activations fp8 --compare p_tiles=$P \
      --tokens 1024,4096,16384 --reps 10 --rounds 4 --warm-seconds 3 --json $R/bench-p-tiles.json 2>/dev/null | cut -d'|' -f2-6
    pack
  fi
  if [ $part = S ]; then
    k=moegen_sm90_gemm1_m64n32k128s4_fp8,moegen_sm90_gemm1_m128n128k128s4_fp8
    for g in m64n32k128s4 m64n32k128s6 m128n32k128s6 m128n64k128s6 m128n128k128s4 m128n128k128s6; do
      k=$k,moegen_sm90_gemm2_${g}_fp8
    done
    timeout -k 5 200 python3 -m moegen tune --model qwen3-30b-a3b --activations fp8 --kernels $k -j 16 \
      --buckets 256,1024,4096,16384 --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 \
      --table-root configs/dispatch > $R/tune-s.log 2>&1
    echo "tune rc $?"; grep -E "^\[|timings|replacing|adding" $R/tune-s.log | tail -6
    cp configs/dispatch/sm90/nvidia-h200-132sm/e128-l128-k8-h2048-i768-fp8.json $R/
    pack
    timeout -k 5 120 python3 -m moegen build --arch sm90 --model qwen3-30b-a3b --activations fp8 -j 16 > $R/build-s.log 2>&1
    echo "build rc $?"; tail -1 $R/build-s.log
    timeout -k 5 60 python3 -m moegen sass --model qwen3-30b-a3b --activations fp8 > $R/sass-s.txt 2>&1
    echo "sass rc $?: $(tail -1 $R/sass-s.txt)"
    timeout -k 5 100 python3 -m moegen check --model qwen3-30b-a3b --activations fp8 --tokens 0,1,3,64,300,1024,4100 \
      > $R/check-s.txt 2>&1; echo "check rc $?: $(tail -1 $R/check-s.txt)"
    pack
    H=generated/_head/qwen3-30b-a3b-w4a8/sm90
    timeout -k 5 150 python3 -m moegen bench --model qwen3-30b-a3b --activations fp8 --compare head=$H \
      --tokens 256,1024,4096,16384 --reps 10 --rounds 4 --warm-seconds 3 --json $R/bench-s-a.json 2>/dev/null | cut -d'|' -f2-6
    pack
    timeout -k 5 150 python3 -m moegen bench --model qwen3-30b-a3b --activations fp8 --out generated/_head \
      --compare new=generated/qwen3-30b-a3b-w4a8/sm90 --tokens 256,1024,4096,16384 --reps 10 --rounds 4 \
      --warm-seconds 3 --json $R/bench-s-b.json 2>/dev/null | cut -d'|' -f2-6
    pack
    timeout -k 5 200 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -k qwen3 -q -s -p no:cacheprovider > $R/pytest-s.log 2>&1
    grep -E "seed|passed|failed|FAILED|Error" $R/pytest-s.log | tail -4
    pack
  fi
  if [ $part = G ]; then
    timeout -k 5 240 python3 -m pytest -m gpu tests/test_gpu_w4a8.py tests/test_quantize_gpu.py -q -s -p no:cacheprovider \
      > $R/pytest-g.log 2>&1
    grep -E "seed|passed|failed|FAILED|Error" $R/pytest-g.log | tail -4
    grep -E "rel L2" $R/pytest-g.log > $R/w4a8-errors-g.txt
    pack
  fi
  if [ $part = T ]; then
    k=""
    for g in gemm1_m64n8k128s4 gemm1_m64n8k128s6 gemm1_m64n8k128s8 gemm2_m64n8k128s4 gemm2_m64n8k128s6 gemm2_m64n8k128s8; do
      k=$k${k:+,}moegen_sm90_${g}_fp8
    done
    timeout -k 5 150 python3 -m moegen tune --model deepseek-v3 --activations fp8 --kernels $k -j 16 --buckets 1 \
      --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 --table-root configs/dispatch > $R/tune-t.log 2>&1
    echo "tune rc $?"; grep -E "^\[|timings|replacing|adding" $R/tune-t.log | tail -4
    cp configs/dispatch/sm90/nvidia-h200-132sm/e256-l256-k8-h7168-i2048-fp8.json $R/
    pack
    timeout -k 5 100 python3 -m moegen build --arch sm90 --model deepseek-v3 --activations fp8 -j 16 > $R/build-t.log 2>&1
    echo "build rc $?"
    timeout -k 5 60 python3 -m moegen check --model deepseek-v3 --activations fp8 --tokens 0,1,3 > $R/check-t.txt 2>&1
    echo "check rc $?: $(tail -1 $R/check-t.txt)"
    pack
  fi
done
