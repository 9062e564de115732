#!/usr/bin/env bash
# The 2026-12-01 sessions' verification run (prepared in the fourth, run in the fifth), after `source lab/device_env.sh` (the
# persistent grid for short K loops, the one-tile tail, the retuned DeepSeek-V4-Flash and gpt-oss-120b
# tables): the GPU suite on what `moegen build` ships (and Qwen3 with the persistent grid forced),
# compute-sanitizer, the SASS audit, and two A/Bs in one bench each against 39e3e35's default builds
# with their own tables (generated/_old): DeepSeek-V4-Flash, then (part 2, the next call) Qwen3-30B-A3B
# and DeepSeek-V3 with the tables retuned in round o.  $OUT/results.tgz.
#   bash lab/round_20261201_n.sh OUT 1|2
set -uo pipefail
OUT=$1; PART=${2:-1}; R=/tmp/round_n$PART; rm -rf $R; mkdir -p $R
bench() {  # model tokens label=dir...
  local model=$1 tokens=$2; shift 2
  local args=(); for c in "$@"; do args+=(--compare "$c"); done
  timeout 200 python3 -m moegen bench --model $model --out generated/_default "${args[@]}" --tokens $tokens --reps 10 \
    --warm-seconds 2 --json $R/bench-$model.json > $R/bench-$model.md 2> $R/bench-$model.log; echo "bench $model rc $?"
  cat $R/bench-$model.md | grep -E "^\||ceilings" | head -40
}
if [ "$PART" = 2 ]; then
  bench qwen3-30b-a3b 1,64,256,1024,4096,16384 old=generated/_old/qwen3-30b-a3b/sm90
  bench deepseek-v3 1,16,64,256,1024,4096,16384 old=generated/_old/deepseek-v3/sm90
  tar czf "$OUT/results2.tgz" -C $R .
  exit 0
fi
timeout 90 python3 -m moegen build --model deepseek-v4-flash --arch sm90 --out generated/_default \
  --objects generated/.objects > $R/build.log 2>&1; echo "default build rc $?"
for m in qwen3-30b-a3b deepseek-v3; do timeout 90 python3 -m moegen build --model $m --arch sm90 --out generated/_default \
  --objects generated/.objects > $R/build-$m.log 2>&1; echo "$m default build rc $?"; done
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
timeout 60 python3 -m moegen sass --model qwen3-30b-a3b --out generated/_default > $R/sass-qwen3.txt 2>&1; echo "qwen3 sass rc $?"
grep -E "FAILED|serialized|OK" $R/sass-qwen3.txt | tail -8
timeout 60 python3 tools/timeline.py deepseek-v4-flash 1,4,16,64,256 generated/_default/deepseek-v4-flash/sm90 \
  > $R/timeline.txt 2>&1; echo "timeline rc $?"; tail -30 $R/timeline.txt
bench deepseek-v4-flash 1,4,16,64,256,1024,4096,16384 old=generated/_old/deepseek-v4-flash/sm90
tar czf "$OUT/results.tgz" -C $R .
