#!/usr/bin/env bash
# The 2026-12-01 (fourth) session's last device run, after `source lab/device_env.sh`, at 61b8390 (the
# persistent grid for short K loops, the one-tile tail, the retuned DeepSeek-V4-Flash and gpt-oss-120b
# tables): the GPU suite on what `moegen build` ships (and Qwen3 with the persistent grid forced),
# compute-sanitizer, the SASS audit, and two A/Bs in one bench each against 39e3e35's default builds
# with their own tables (generated/_old): DeepSeek-V4-Flash and Qwen3-30B-A3B.  $OUT/results.tgz.
set -uo pipefail
OUT=$1; R=/tmp/round_n; rm -rf $R; mkdir -p $R
timeout 90 python3 -m moegen build --model deepseek-v4-flash --arch sm90 --out generated/_default \
  --objects generated/.objects > $R/build.log 2>&1; echo "default build rc $?"
timeout 90 python3 -m moegen build --model qwen3-30b-a3b --arch sm90 --out generated/_default \
  --objects generated/.objects > $R/build-q.log 2>&1; echo "qwen3 default build rc $?"
export MOEGEN_TEST_KERNELS=default
timeout 150 python3 lab/build_test_libs.py > $R/test_libs.log 2>&1; echo "test libs rc $?"
timeout -s INT 120 python3 -m pytest -m gpu tests/test_gpu_layer.py tests/test_quantize_gpu.py -q -s \
  -p no:cacheprovider > $R/pytest.log 2>&1; echo "pytest rc $?"
grep -E "seed|passed|failed|FAILED|Error" $R/pytest.log | tail -6
MOEGEN_GRID=persistent timeout -s INT 60 python3 -m pytest -m gpu tests/test_gpu_layer.py -q -s -p no:cacheprovider \
  -k "layer_matches_reference and qwen3" > $R/pytest_persistent.log 2>&1; echo "persistent-grid pytest rc $?"
tail -1 $R/pytest_persistent.log
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py \
  generated/_default/deepseek-v4-flash/sm90 > $R/sanitizer.log 2>&1; echo "sanitizer rc $?"; tail -1 $R/sanitizer.log
timeout 60 python3 -m moegen sass --model deepseek-v4-flash --out generated/_default > $R/sass.txt 2>&1; echo "sass rc $?"
grep -E "FAILED|serialized|OK" $R/sass.txt | tail -4
timeout 60 python3 tools/timeline.py deepseek-v4-flash 1,4,16,64,256 generated/_default/deepseek-v4-flash/sm90 \
  > $R/timeline.txt 2>&1; echo "timeline rc $?"; tail -30 $R/timeline.txt
bench() {  # model tokens label=dir...
  local model=$1 tokens=$2; shift 2
  local args=(); for c in "$@"; do args+=(--compare "$c"); done
  timeout 150 python3 -m moegen bench --model $model --out generated/_default "${args[@]}" --tokens $tokens --reps 10 \
    --warm-seconds 2 --json $R/bench-$model.json > $R/bench-$model.md 2> $R/bench-$model.log; echo "bench $model rc $?"
  cat $R/bench-$model.md | grep -E "^\|" | head -40
}
bench deepseek-v4-flash 1,4,16,64,256,1024,4096,16384 old=generated/_old/deepseek-v4-flash/sm90
bench qwen3-30b-a3b 1,64,256,1024,4096,16384 old=generated/_old/qwen3-30b-a3b/sm90
tar czf "$OUT/results.tgz" -C $R .
