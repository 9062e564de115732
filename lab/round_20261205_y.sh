#!/usr/bin/env bash
# Round y (2026-12-05): one bench run per shipped model at one commit, W4A16 (the default build) and
# W4A8 interleaved per T, for docs/benchmarks.md's current tables; and the GPU checkpoint test whose
# FP8 fixture overflowed under torch 2.11 (552e9de).
#   B MODEL   moegen bench of generated/_bench/MODEL (built here: `moegen build --model MODEL --arch sm90
#             --out generated/_bench`) against generated/_gputest/MODEL-w4a8 (`--activations fp8`)
#   Q         tests/test_checkpoint.py's GPU tests
#   S         tests/test_sm100_glue_gpu.py: the SM100 layer around stand-in GEMMs, `moegen check` on the H200
# Stage: bash lab/stage_carry.sh generated/_bench generated/_gputest (the builds above, and for W4A8
# python3 lab/build_test_libs.py --w4a8 or just its MODEL-w4a8 variant)
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
rc=0
while [ $# -gt 0 ]; do
  part=$1; shift
  case $part in
  B)
    model=$1; shift
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $D/gpu-$model.txt
    timeout -k 5 560 python3 -m moegen bench --model $model --out generated/_bench \
      --compare w4a8=generated/_gputest/$model-w4a8/sm90 --tokens 1,4,16,64,256,1024,4096,16384 \
      --reps 10 --rounds 4 --warm-seconds 5 --json $D/bench-$model.json > $D/bench-$model.txt 2>&1 || rc=1
    grep -E " T=" $D/bench-$model.txt | cut -c1-120 ;;
  Q)
    (timeout -k 5 100 python3 -m pytest -m gpu tests/test_checkpoint.py -q -p no:cacheprovider 2>&1) > $D/checkpoint.txt || rc=1
    tail -n 2 $D/checkpoint.txt ;;
  S)
    (timeout -k 5 400 python3 -m pytest -m gpu tests/test_sm100_glue_gpu.py -q -s -p no:cacheprovider 2>&1) \
      > $D/sm100_glue.txt || rc=1
    grep -E "FAIL|passed|failed|error" $D/sm100_glue.txt | tail -n 30 ;;
  *) echo "unknown part $part"; rc=1 ;;
  esac
done
exit $rc
