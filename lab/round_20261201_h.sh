#!/usr/bin/env bash
# The 2026-12-01 (third) session's last device run, after `source lab/device_env.sh`: the GPU suite on
# what `moegen build` ships (MOEGEN_TEST_KERNELS=default) twice, each with a fresh seed, under the
# tightened error bound.  Results: $OUT/results.tgz.
set -uo pipefail
OUT=$1; R=/tmp/round_h; rm -rf $R; mkdir -p $R
export MOEGEN_TEST_KERNELS=default
timeout 240 python3 lab/build_test_libs.py > $R/test_libs.log 2>&1; echo "test libs rc $?"
for run in 1 2; do
  timeout -s INT 120 python3 -m pytest -m gpu tests/test_gpu_layer.py tests/test_quantize_gpu.py -q -s \
    -p no:cacheprovider > $R/pytest-$run.log 2>&1; echo "pytest $run rc $?"
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-$run.log | tail -6
done
tar czf "$OUT/results.tgz" -C $R .
