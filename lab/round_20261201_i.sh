#!/usr/bin/env bash
# The 2026-12-01 (third) session's device run for the token sums fused into GEMM2 (no finalize kernel),
# after `source lab/device_env.sh`: the GPU-test libraries (MOEGEN_TEST_KERNELS=default) on 16 cores,
# the GPU suite, the default builds of DeepSeek-V4-Flash and gpt-oss-120b benched against the same
# kernels with the separate finalize (generated/_finalize, built at baeb81b), compute-sanitizer
# memcheck and synccheck, the SASS audit.  Results: $OUT/results.tgz.
set -uo pipefail
OUT=$1; R=/tmp/round_i; rm -rf $R; mkdir -p $R
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
pack() { tar czf "$OUT/results.tgz" -C $R .; }
export MOEGEN_TEST_KERNELS=default
timeout $(left 260) python3 lab/build_test_libs.py > $R/test_libs.log 2>&1; echo "test libs rc $? at $(( $(date +%s) - t0 )) s"
grep -h "error" -A3 generated/_gputest/*/sm90/logs/*.log 2>/dev/null | head -20
timeout -s INT $(left 330) python3 -m pytest -m gpu tests/test_gpu_layer.py -q -s -p no:cacheprovider > $R/pytest.log 2>&1
echo "pytest rc $?"; grep -E "seed|passed|failed|FAILED|Error" $R/pytest.log | tail -8; pack
for model in deepseek-v4-flash gpt-oss-120b; do
  timeout $(left 360) python3 -m moegen build --model $model --arch sm90 --out generated/_default --objects generated/.objects \
    > $R/build-$model.log 2>&1 || { echo "build $model failed"; tail -3 $R/build-$model.log; continue; }
  timeout $(left 480) python3 -m moegen bench --model $model --out generated/_default \
    --compare finalize=generated/_finalize/$model/sm90 --reps 10 --json $R/bench-$model.json > $R/bench-$model.md 2> $R/bench-$model.log
  echo "bench $model rc $?"; grep -E "^\| (default|finalize)" $R/bench-$model.md | awk -F'|' '{print $2,$3,$4,$7}'; pack
done
python3 -m moegen sass --model deepseek-v4-flash --out generated/_default > $R/sass.txt 2>&1; echo "sass rc $?"; tail -1 $R/sass.txt
for tool in memcheck synccheck; do
  timeout $(left 570) compute-sanitizer --tool $tool --error-exitcode 1 python3 tools/sanitize_run.py \
    generated/_default/deepseek-v4-flash/sm90 > $R/sanitizer-$tool.log 2>&1; echo "sanitizer $tool rc $?"; tail -1 $R/sanitizer-$tool.log
done
pack; echo "round done in $(( $(date +%s) - t0 )) s"
