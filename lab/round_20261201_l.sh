#!/usr/bin/env bash
# The 2026-12-01 (fourth) session's second device run, after `source lab/device_env.sh` and round k's
# tables: the GPU suite on what `moegen build` ships, compute-sanitizer, and two A/Bs in one bench each:
# Qwen3-30B-A3B's default build against the previous commit's (its gemm2 m128n128k64s4 ran the
# persistent grid from 4096 expert rows), and the tiles ptxas serializes at their planned occupancy
# against one CTA per SM less (generated/_occ, built with lab/experiments/one_cta_less.patch) on the
# models whose tables pick them; and DeepSeek-V4-Flash's new default build (round k's table) against the
# previous commit's with its own table (generated/_old/dispatch).  Results: $OUT/results.tgz.
set -uo pipefail
OUT=$1; R=/tmp/round_l; rm -rf $R; mkdir -p $R
timeout 90 python3 -m moegen build --model deepseek-v4-flash --arch sm90 --out generated/_default \
  --objects generated/.objects > $R/build.log 2>&1; echo "default build rc $?"
export MOEGEN_TEST_KERNELS=default
timeout 150 python3 lab/build_test_libs.py > $R/test_libs.log 2>&1; echo "test libs rc $?"
timeout -s INT 120 python3 -m pytest -m gpu tests/test_gpu_layer.py tests/test_quantize_gpu.py -q -s \
  -p no:cacheprovider > $R/pytest.log 2>&1; echo "pytest rc $?"
grep -E "seed|passed|failed|FAILED|Error" $R/pytest.log | tail -6
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py \
  generated/_default/deepseek-v4-flash/sm90 > $R/sanitizer.log 2>&1; echo "sanitizer rc $?"; tail -1 $R/sanitizer.log
timeout 60 python3 -m moegen sass --model deepseek-v4-flash --out generated/_default > $R/sass.txt 2>&1; echo "sass rc $?"
grep -E "FAILED|serialized|OK" $R/sass.txt | tail -4
bench() {  # model tokens label=dir...
  local model=$1 tokens=$2; shift 2
  local args=(); for c in "$@"; do args+=(--compare "$c"); done
  timeout 150 python3 -m moegen bench --model $model --out generated/_default "${args[@]}" --tokens $tokens --reps 10 \
    --warm-seconds 2 --json $R/bench-$model.json > $R/bench-$model.md 2> $R/bench-$model.log; echo "bench $model rc $?"
  cat $R/bench-$model.md | grep -E "^\|" | head -40
}
bench deepseek-v4-flash 1,4,16,64,256,1024,4096,16384 old=generated/_old/deepseek-v4-flash/sm90
bench qwen3-30b-a3b 64,256,1024,4096,16384 old=generated/_old/qwen3-30b-a3b/sm90 occ=generated/_occ/qwen3-30b-a3b/sm90
bench deepseek-v3 16,64,256 occ=generated/_occ/deepseek-v3/sm90
tar czf "$OUT/results.tgz" -C $R .
