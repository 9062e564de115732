#!/usr/bin/env bash
# W4A8 round (2026-12-02), after `source lab/device_env.sh`; three calls on one warm machine.
#   A: the W4A8 GPU tests (their libraries carried), meanwhile the BF16 tests' libraries on the
#      default kernels (every GEMM header changed, so every object is new) on all cores.
#   B: the BF16 GPU suite on them; compute-sanitizer on a W4A8 layer.
#   C1: build DeepSeek-V4-Flash's W4A8 shortlist, its BF16 default kernels and the W4A8 tests'
#      libraries on all cores; tune the shortlist, compact it into configs/dispatch.
#   C2: one bench run: the BF16 default build of this commit, the W4A8 tuned build, and the BF16
#      build of the previous commit (generated/_default, carried); the W4A8 GPU tests again.
# Results (logs, tables, bench JSON) in $OUT/results.tgz.
#   bash lab/round_20261202_a.sh OUT A|B|C1|C2
set -uo pipefail
OUT=$1
R=/tmp/round_a; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R .; }
export MOEGEN_TEST_KERNELS=default
if [ "$2" = A ]; then
  (timeout -k 5 330 python3 lab/build_test_libs.py > $R/build-test-libs.log 2>&1; echo "test libs rc $?" >> $R/build-test-libs.log) &
  timeout -k 5 230 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider > $R/pytest-w4a8.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8.log | tail -12
  grep -E "rel L2" $R/pytest-w4a8.log | sort -t' ' -k2 | awk '{print $1, $2, $5, $6, $9}' | sort -u | head -60 > $R/w4a8-errors.txt
  pack
  wait
  tail -2 $R/build-test-libs.log
fi
if [ "$2" = B ]; then
  timeout -k 5 300 python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider > $R/pytest-bf16.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-bf16.log | tail -12
  pack
  timeout -k 5 60 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py \
    generated/_gputest/gpt-oss-20b-tp2-w4a8/sm90 > $R/sanitizer-w4a8.log 2>&1
  echo "sanitizer rc $?"; tail -2 $R/sanitizer-w4a8.log
  pack
fi
if [ "$2" = C1 ]; then  # the W4A8 kernels changed after A (block_k 128 only): every build here
  # one build at a time on all cores (three at once, 60 nvcc processes on 16 cores, all missed 200 s)
  timeout -k 5 200 python3 -m moegen build --model deepseek-v4-flash --activations fp8 --arch sm90 --kernels shortlist \
    -j 16 > $R/build-w4a8-shortlist.log 2>&1
  timeout -k 5 120 python3 -m moegen build --model deepseek-v4-flash --arch sm90 -j 16 > $R/build-bf16.log 2>&1
  for f in $R/build-w4a8-shortlist.log $R/build-bf16.log; do tail -n 1 $f; done
  grep -c SERIALIZED $R/build-w4a8-shortlist.log; grep -E "SPILL" $R/build-w4a8-shortlist.log | head -5
  timeout -k 5 240 python3 -m moegen tune --model deepseek-v4-flash --activations fp8 --kernels shortlist --no-build \
    --tolerance 0 --buckets 1,4,16,64,256,1024,4096,16384 --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 \
    > $R/tune-w4a8.log 2>&1
  grep -E "T=|Error" $R/tune-w4a8.log | tail -10
  raw=$(ls -t generated/dispatch/sm90/*/*-fp8.json 2>/dev/null | head -1)
  if [ -n "$raw" ]; then
    cp "$raw" $R/raw-w4a8.json
    python3 lab/compact_table.py "$raw" configs/dispatch > $R/compact.log 2>&1 && cp "$(head -1 $R/compact.log)" $R/shipped-w4a8.json
    tail -2 $R/compact.log
  fi
  pack
fi
if [ "$2" = C2 ]; then
  timeout -k 5 280 python3 -m moegen bench --model deepseek-v4-flash --compare "w4a8=generated/deepseek-v4-flash-w4a8/sm90" \
    --compare "bf16-611b0c3=generated/_default/deepseek-v4-flash/sm90" --tokens 1,4,16,64,256,1024,4096,16384 \
    --reps 10 --rounds 4 --warm-seconds 3 --json $R/bench.json > $R/bench.md 2> $R/bench.log
  cat $R/bench.md; tail -2 $R/bench.log
  pack
  timeout -k 5 150 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider > $R/pytest-w4a8.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8.log | tail -12
  pack
fi
