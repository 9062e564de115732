#!/usr/bin/env bash
# The 2026-12-01 (third) session's device run for issue 20's fp32 GEMM2 rows, after
# `source lab/device_env.sh`: the GPU suite on what `moegen build` ships (MOEGEN_TEST_KERNELS=default,
# the seed of 05e697b's run, so the errors compare input for input); the layer with fp32 rows against
# the same kernels with bf16 rows (generated/_bf16rows, built at 5bf91af) for DeepSeek-V4-Flash and
# gpt-oss-120b, one bench run each; the default DeepSeek-V4-Flash build from an empty object store;
# SASS audit and compute-sanitizer on it.  Results: $OUT/results.tgz.
set -uo pipefail
OUT=$1; R=/tmp/round_g; rm -rf $R; mkdir -p $R
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
pack() { tar czf "$OUT/results.tgz" -C $R .; }
export MOEGEN_TEST_KERNELS=default
timeout $(left 200) python3 lab/build_test_libs.py > $R/test_libs.log 2>&1; echo "test libs rc $? at $(( $(date +%s) - t0 )) s"
MOEGEN_TEST_SEED=684616272 timeout -s INT $(left 300) python3 -m pytest -m gpu tests/test_gpu_layer.py \
  tests/test_quantize_gpu.py -q -s -p no:cacheprovider > $R/pytest.log 2>&1; echo "pytest rc $?"
grep -E "seed|passed|failed|FAILED|Error" $R/pytest.log | tail -8; pack
for model in deepseek-v4-flash gpt-oss-120b; do
  timeout $(left 420) python3 -m moegen bench --model $model --out generated/_default \
    --compare bf16rows=generated/_bf16rows/$model/sm90 --reps 10 --json $R/bench-$model.json > $R/bench-$model.md 2> $R/bench-$model.log
  echo "bench $model rc $?"; grep -E "^\| (default|bf16rows)" $R/bench-$model.md | awk -F'|' '{print $2,$3,$4,$7}'; pack
done
rm -rf /tmp/fresh; s=$(date +%s)
timeout $(left 480) python3 -m moegen build --model deepseek-v4-flash --arch sm90 --out /tmp/fresh -j16 > $R/default_build.log 2>&1
echo "default build from an empty object store: rc $? in $(( $(date +%s) - s )) s"; grep -E "translation|built" $R/default_build.log | tail -2
python3 -m moegen sass --model deepseek-v4-flash --out generated/_default > $R/sass.txt 2>&1; echo "sass rc $?"; tail -3 $R/sass.txt
timeout $(left 580) compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py \
  generated/_default/deepseek-v4-flash/sm90 > $R/sanitizer.log 2>&1; echo "sanitizer rc $?"; tail -2 $R/sanitizer.log
pack; echo "round done in $(( $(date +%s) - t0 )) s"
