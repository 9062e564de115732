#!/usr/bin/env bash
# W4A8 round b (2026-12-02), after `source lab/device_env.sh`.
#   P: one bench run, DeepSeek-V4-Flash: the BF16 default build, the W4A8 build of this commit
#      (hidden states quantized by the routing warps, the h quantizer triggering GEMM2 early) and of
#      the previous one (generated/_prev); then ncu stall/pipe/L2 profiles of the T = 4096 and 16384
#      GEMMs, W4A8 and BF16.
# Results in $OUT/results.tgz.     bash lab/round_20261202_b.sh OUT P
set -uo pipefail
OUT=$1
R=/tmp/round_b; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R .; }
if [ "$2" = P ]; then
  timeout -k 5 200 python3 -m moegen bench --model deepseek-v4-flash --compare "w4a8=generated/deepseek-v4-flash-w4a8/sm90" \
    --compare "w4a8-prev=generated/_prev/deepseek-v4-flash-w4a8/sm90" --tokens 1,4,16,64,256,1024,4096,16384 \
    --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench.json > $R/bench.md 2> $R/bench.log
  cat $R/bench.md; tail -2 $R/bench.log
  pack
  for T in 16384 4096; do
    MOEGEN_PROFILE_KERNELS=moegen_sm90_gemm1_m128n128k128s4_fp8,moegen_sm90_gemm2_m128n128k128s4_fp8 timeout -k 5 100 \
      bash lab/stall_profile.sh deepseek-v4-flash-w4a8 $T generated/deepseek-v4-flash-w4a8/sm90 > $R/ncu-w4a8-$T.txt 2>&1
    pack
  done
  MOEGEN_PROFILE_KERNELS=moegen_sm90_gemm1_m256n128k64s8,moegen_sm90_gemm2_m256n128k64s6 timeout -k 5 100 \
    bash lab/stall_profile.sh deepseek-v4-flash 16384 generated/deepseek-v4-flash/sm90 > $R/ncu-bf16-16384.txt 2>&1
  pack
  head -c 3000 $R/ncu-w4a8-16384.txt
fi
if [ "$2" = Q ]; then  # where W4A8's decode microseconds go; the hottest SASS of its T = 16384 GEMM1
  for lib in generated/deepseek-v4-flash-w4a8/sm90 generated/_prev/deepseek-v4-flash-w4a8/sm90; do
    echo "== $lib"; timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 1,4,16 $lib 2>&1 | tail -24
  done > $R/timeline.txt
  echo "== bf16" >> $R/timeline.txt
  timeout -k 5 40 python3 tools/timeline.py deepseek-v4-flash 1,4 generated/deepseek-v4-flash/sm90 >> $R/timeline.txt 2>&1
  cat $R/timeline.txt; pack
  for g in 1 2; do
    MOEGEN_PROFILE_KERNELS=moegen_sm90_gemm1_m128n128k128s4_fp8,moegen_sm90_gemm2_m128n128k128s4_fp8 timeout -k 5 150 \
      ncu --clock-control none -k regex:grouped_gemm --launch-skip $((1 + g)) --launch-count 1 --section SourceCounters \
      --page source --print-source sass --csv python3 lab/profile_run.py deepseek-v4-flash-w4a8 16384 \
      generated/deepseek-v4-flash-w4a8/sm90 > $R/src-w4a8-gemm$g.csv 2> $R/ncu-src.log
    python3 lab/sass_hotspots.py $R/src-w4a8-gemm$g.csv 1000000 > $R/hot-w4a8-gemm$g.txt 2>&1; head -50 $R/hot-w4a8-gemm$g.txt
    pack
  done
fi
if [ "$2" = V ]; then  # after the promotion interval (2 K tiles) and the quantizer changes
  (timeout -k 5 200 python3 lab/build_test_libs.py --w4a8 > $R/build-w4a8-test-libs.log 2>&1; echo "rc $?" >> $R/build-w4a8-test-libs.log) &
  timeout -k 5 200 python3 -m moegen bench --model deepseek-v4-flash --compare "w4a8=generated/deepseek-v4-flash-w4a8/sm90" \
    --compare "w4a8-prev=generated/_prev/deepseek-v4-flash-w4a8/sm90" --tokens 1,4,16,64,256,1024,4096,16384 \
    --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-v.json > $R/bench-v.md 2> $R/bench-v.log
  cat $R/bench-v.md; tail -2 $R/bench-v.log
  pack
  wait; tail -3 $R/build-w4a8-test-libs.log
  timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 1,4,16 generated/deepseek-v4-flash-w4a8/sm90 2>&1 | grep -v Warn > $R/timeline-v.txt
  cat $R/timeline-v.txt
  timeout -k 5 240 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider > $R/pytest-w4a8.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8.log | tail -12
  grep -E "rel L2" $R/pytest-w4a8.log | head -80 > $R/w4a8-errors.txt
  pack
fi
if [ "$2" = F1 ]; then  # the final kernels: every GPU test library, the W4A8 tests, the bench, the decode timeline
  export MOEGEN_TEST_KERNELS=default
  timeout -k 5 240 python3 lab/build_test_libs.py > $R/build-test-libs.log 2>&1; echo "test libs rc $?"; tail -3 $R/build-test-libs.log
  timeout -k 5 100 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider > $R/pytest-w4a8-f.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8-f.log | tail -8
  pack
  timeout -k 5 200 python3 -m moegen bench --model deepseek-v4-flash --compare "w4a8=generated/deepseek-v4-flash-w4a8/sm90" \
    --compare "w4a8-prev=generated/_prev/deepseek-v4-flash-w4a8/sm90" --tokens 1,4,16,64,256,1024,4096,16384 \
    --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-f.json > $R/bench-f.md 2> $R/bench-f.log
  cat $R/bench-f.md; tail -1 $R/bench-f.log
  timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash-w4a8 1,4,16 generated/deepseek-v4-flash-w4a8/sm90 2>&1 | grep -v -i warn > $R/timeline-f.txt
  cat $R/timeline-f.txt
  pack
fi
if [ "$2" = F2 ]; then  # the BF16 suite on the same libraries; compute-sanitizer on a W4A8 layer at decode and prefill
  export MOEGEN_TEST_KERNELS=default
  timeout -k 5 330 python3 -m pytest -m gpu tests/ -q -p no:cacheprovider --ignore=tests/test_gpu_w4a8.py > $R/pytest-all.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-all.log | tail -12
  pack
  timeout -k 5 60 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py \
    generated/_gputest/deepseek-v4-flash-w4a8/sm90 > $R/sanitizer-w4a8.log 2>&1
  echo "sanitizer rc $?"; tail -2 $R/sanitizer-w4a8.log
  timeout -k 5 90 compute-sanitizer --tool synccheck --error-exitcode 1 python3 tools/sanitize_run.py \
    generated/_gputest/deepseek-v4-flash-w4a8/sm90 > $R/synccheck-w4a8.log 2>&1
  echo "synccheck rc $?"; tail -2 $R/synccheck-w4a8.log
  pack
fi
if [ "$2" = G ]; then  # final: W4A8 tests, the BF16 tests whose libraries were carried, decode bench and timeline, sanitizers
  export MOEGEN_TEST_KERNELS=default
  timeout -k 5 100 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider > $R/pytest-w4a8-g.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8-g.log | tail -6
  timeout -k 5 150 python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider -k "deepseek-v4-flash and not ep1of8 or grouped-64e" > $R/pytest-bf16-g.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-bf16-g.log | tail -6
  pack
  timeout -k 5 100 python3 -m moegen bench --model deepseek-v4-flash --compare "w4a8=generated/deepseek-v4-flash-w4a8/sm90" \
    --tokens 1,4,16,64 --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-g.json > $R/bench-g.md 2> $R/bench-g.log
  cat $R/bench-g.md
  timeout -k 5 40 python3 tools/timeline.py deepseek-v4-flash-w4a8 1,16 generated/deepseek-v4-flash-w4a8/sm90 2>&1 | grep -v -i warn
  pack
  timeout -k 5 60 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py \
    generated/_gputest/deepseek-v4-flash-w4a8/sm90 > $R/sanitizer-w4a8.log 2>&1
  echo "memcheck rc $?"; tail -1 $R/sanitizer-w4a8.log
  timeout -k 5 60 compute-sanitizer --tool synccheck --error-exitcode 1 python3 tools/sanitize_run.py \
    generated/_gputest/deepseek-v4-flash-w4a8/sm90 > $R/synccheck-w4a8.log 2>&1
  echo "synccheck rc $?"; tail -1 $R/synccheck-w4a8.log
  pack
fi
if [ "$2" = T ]; then  # retune T = 1024, 4096, 16384 of DeepSeek-V4-Flash W4A8 over the shortlist with the m64n64 / m64n128 tiles
  # the shipped table as the user table, so the tune adds these buckets to it (its decode buckets stay)
  shipped=configs/dispatch/sm90/nvidia-h200-132sm/e256-l256-k6-h4096-i2048-fp8.json
  mkdir -p generated/dispatch/sm90/nvidia-h200-132sm && cp $shipped generated/dispatch/sm90/nvidia-h200-132sm/
  timeout -k 5 240 python3 -m moegen tune --model deepseek-v4-flash --activations fp8 --kernels shortlist --no-build \
    --tolerance 0 --buckets 1024,4096,16384 --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 > $R/tune-t.log 2>&1
  grep -E "T=|Error|timings" $R/tune-t.log | tail -12
  cp generated/dispatch/sm90/nvidia-h200-132sm/e256-l256-k6-h4096-i2048-fp8.json $R/raw-t.json
  pack
  timeout -k 5 120 python3 -m moegen bench --model deepseek-v4-flash --compare "w4a8=generated/deepseek-v4-flash-w4a8/sm90" \
    --tokens 1024,4096,16384 --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-t.json > $R/bench-t.md 2> $R/bench-t.log
  cat $R/bench-t.md
  pack
fi
if [ "$2" = D ]; then  # retune the decode buckets of DeepSeek-V4-Flash W4A8 with the new quantizer chain, then bench them
  shipped=configs/dispatch/sm90/nvidia-h200-132sm/e256-l256-k6-h4096-i2048-fp8.json
  mkdir -p generated/dispatch/sm90/nvidia-h200-132sm && cp $shipped generated/dispatch/sm90/nvidia-h200-132sm/
  timeout -k 5 150 python3 -m moegen tune --model deepseek-v4-flash --activations fp8 --kernels shortlist --no-build \
    --tolerance 0 --buckets 1,4,16,64 --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 > $R/tune-d.log 2>&1
  grep -E "T=|Error|timings" $R/tune-d.log | tail -8
  cp generated/dispatch/sm90/nvidia-h200-132sm/e256-l256-k6-h4096-i2048-fp8.json $R/raw-d.json
  pack
  timeout -k 5 100 python3 -m moegen bench --model deepseek-v4-flash --compare "w4a8=generated/deepseek-v4-flash-w4a8/sm90" \
    --tokens 1,4,16,64 --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-d.json > $R/bench-d.md 2> $R/bench-d.log
  cat $R/bench-d.md
  pack
fi
