#!/usr/bin/env bash
# Round h (2026-12-02, seventh session): W4A8 GEMM2 quantizing a small batch's `h` as it loads it
# (GEMM1's epilogue supplies each row's amax; no quantizer kernel between the GEMMs), with
# MOEGEN_QUANTIZE_ON_LOAD_MAX_ROWS=0 giving the previous path (the quantizer kernel) in the same build.
#   X: builds here (16 cores): DeepSeek-V4-Flash, Qwen3-30B-A3B and DeepSeek-V3 W4A8, DeepSeek-V4-Flash and
#      Qwen3-30B-A3B W4A16 (default builds), the W4A8 GPU-test libraries; skipped where present.
#   V: bit for bit, switch on (default) against off, and forced at every T a narrow GEMM2 runs against
#      off; compute-sanitizer memcheck; `moegen check` of the three W4A8 builds (DeepSeek-V3's at
#      T = 64 and 256 too: the table's picks since 12b28e0).
#   T: the W4A8 GPU tests.
#   B: DeepSeek-V4-Flash and Qwen3-30B-A3B, W4A8 against W4A16, both orders, switch on and off, T = 1-8;
#      the CUDA-graph timeline at T = 1 and 4, on and off.
#   (X, V and B ran on the first version, whose producer converted one K tile after the copies and
#   lost.  T did not run: X had spent the call.)
#   W: the second version (lag Stages / 2, each iteration converting before its own slot's wait),
#      built here: bit for bit on against off, `moegen check`, then B, then I.
#   I: the W4A8 batch-invariance GPU test on DeepSeek-V4-Flash (its test library built here).
# Outcome: both versions gave the same bits and lost at every T (docs/benchmarks.md, "Gathers and
# latencies": the producer's proxy fence is a MEMBAR.ALL.CTA, most likely waiting on its own copies);
# the second version is lab/experiments/gemm2_quantizes_on_load.patch, and main keeps the quantizer
# kernel.  gemm2_quantizes_on_load_converter_warp.patch, not yet run, moves the fence to a warp of its own.
# Results in $OUT/results.tgz.     bash lab/round_20261202_h.sh OUT X|V|T|B|W|I ...
set -uo pipefail
OUT=$1
R=/tmp/round_h; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R . ; }
SW=MOEGEN_QUANTIZE_ON_LOAD_MAX_ROWS
for part in "${@:2}"; do
  if [ $part = X ]; then
    t0=$(date +%s)
    for a in "deepseek-v4-flash --activations fp8" "qwen3-30b-a3b --activations fp8" "deepseek-v3 --activations fp8" \
             "deepseek-v4-flash" "qwen3-30b-a3b"; do
      v=$(echo $a | sed 's/ --activations fp8/-w4a8/')
      [ -f generated/$v/sm90/manifest.json ] || \
        python3 -m moegen build --model $a --arch sm90 -j 4 > $R/build-$v.log 2>&1 &
    done
    python3 lab/build_test_libs.py --w4a8 > $R/build-gputest.log 2>&1 &
    wait
    echo "builds: $(( $(date +%s) - t0 )) s"; tail -qn1 $R/build-*.log
    grep -h "spill\|registers" $R/build-*.log | grep -v " 0 B spill" | grep -i spill | head
    pack
  fi
  if [ $part = V ]; then
    for m in deepseek-v4-flash qwen3-30b-a3b; do
      timeout -k 5 100 python3 lab/bitwise_switch.py generated/$m-w4a8/sm90 $m $SW=0 $SW=64 --activations fp8 \
        --tokens 1,2,3,4,5,8,10,11,16 > $R/bitwise-$m.txt 2>&1
      echo "bitwise $m rc $?: $(tail -1 $R/bitwise-$m.txt)"; grep -m3 DIFF $R/bitwise-$m.txt
      timeout -k 5 100 python3 lab/bitwise_switch.py generated/$m-w4a8/sm90 $m $SW=0 $SW=100000000 --activations fp8 \
        --tokens 37,300,2048 > $R/bitwise-forced-$m.txt 2>&1
      echo "bitwise (forced) $m rc $?: $(tail -1 $R/bitwise-forced-$m.txt)"; grep -m3 DIFF $R/bitwise-forced-$m.txt
    done
    pack
    timeout -k 5 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize_run.py \
      generated/deepseek-v4-flash-w4a8/sm90 > $R/memcheck.txt 2>&1
    echo "memcheck rc $?: $(grep -E 'ERROR SUMMARY' $R/memcheck.txt | tail -1)"
    for m in deepseek-v4-flash qwen3-30b-a3b deepseek-v3; do
      timeout -k 5 120 python3 -m moegen check --model $m --activations fp8 --tokens 0,1,2,3,4,8,11,16,64,256,1024,4100 \
        > $R/check-$m.txt 2>&1; echo "check $m rc $?: $(tail -1 $R/check-$m.txt)"; grep FAIL $R/check-$m.txt | head -3
    done
    pack
  fi
  if [ $part = T ]; then
    timeout -k 5 280 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider > $R/pytest-w4a8.log 2>&1
    grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8.log | tail -4
    grep -E "rel L2" $R/pytest-w4a8.log > $R/w4a8-errors.txt
    pack
  fi
  if [ $part = W ]; then
    for m in deepseek-v4-flash qwen3-30b-a3b; do
      timeout -k 5 100 python3 lab/bitwise_switch.py generated/$m-w4a8/sm90 $m $SW=0 $SW=64 --activations fp8 \
        --tokens 1,2,3,5,8,11,16 > $R/bitwise-w-$m.txt 2>&1
      echo "bitwise $m rc $?: $(tail -1 $R/bitwise-w-$m.txt)"; grep -m3 DIFF $R/bitwise-w-$m.txt
      timeout -k 5 100 python3 -m moegen check --model $m --activations fp8 --tokens 0,1,2,3,8,11,16,64,4100 \
        > $R/check-w-$m.txt 2>&1; echo "check $m rc $?: $(tail -1 $R/check-w-$m.txt)"; grep FAIL $R/check-w-$m.txt | head -3
    done
    pack
  fi
  if [ $part = I ]; then
    timeout -k 5 120 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider \
      -k "batch_invariance and deepseek-v4-flash" > $R/pytest-invariance.log 2>&1
    grep -E "seed|passed|failed|FAILED|Error" $R/pytest-invariance.log | tail -4
    pack
  fi
  if [ $part = B ]; then
    for m in deepseek-v4-flash qwen3-30b-a3b; do
      for sw in 64 0; do
        $( [ $sw = 0 ] && echo env $SW=0 ) timeout -k 5 100 python3 -m moegen bench --model $m --activations fp8 \
          --compare w4a16=generated/$m/sm90 --tokens 1,2,4,8 --reps 10 --rounds 4 --warm-seconds 2 \
          --json $R/bench-$m-sw$sw-a.json 2>/dev/null | cut -d'|' -f2-6
        $( [ $sw = 0 ] && echo env $SW=0 ) timeout -k 5 100 python3 -m moegen bench --model $m \
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
done
