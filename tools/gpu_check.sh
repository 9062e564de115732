#!/usr/bin/env bash
# The whole GPU check of one model on the local GPU, results in OUT/ (default results/):
#   build (the default kernels: a no-op when up to date), SASS audit (of the W4A8 build too),
#   `moegen check` (every kernel against the float64 reference), the GPU test suite,
#   compute-sanitizer memcheck, per-kernel timeline, and the steady-state benchmark.
#
#   tools/gpu_check.sh [OUT] [MODEL]          e.g. tools/gpu_check.sh results deepseek-v4-flash
#
# SKIP_BUILD, SKIP_SASS, SKIP_W4A8 (the W4A8 build and its audit), SKIP_CHECK, SKIP_PYTEST,
# SKIP_SANITIZER, SKIP_TIMELINE, SKIP_BENCH leave a step out; PYTEST_K selects tests (-k);
# BENCH_TOKENS sets the benchmark's T; COMPARE="label=DIR ..." adds builds to benchmark in the same
# run (e.g. tuned=generated-full/deepseek-v4-flash/sm90).
# Exit status: non-zero if any step failed.
set -uo pipefail
OUT=${1:-results}
MODEL=${2:-deepseek-v4-flash}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
MOEGEN=${MOEGEN:-python3 -m moegen}
status=0
step() { echo "== $1"; }
run() { "$@" || { echo "FAILED: $*"; status=1; }; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1

step build
[ -n "${SKIP_BUILD:-}" ] || run $MOEGEN build --model "$MODEL" --arch sm90 > "$OUT/build.log" 2>&1
tail -2 "$OUT/build.log" 2>/dev/null

step sass  # wgmma in every GEMM kernel, no local memory, ptxas's serialized-wgmma advisories
[ -n "${SKIP_SASS:-}" ] || run $MOEGEN sass --model "$MODEL" > "$OUT/sass.txt" 2>&1
tail -1 "$OUT/sass.txt" 2>/dev/null

step sass_w4a8  # the same audit of the model's W4A8 build: its kernels differ, and a spill there would go unseen
if [ -z "${SKIP_SASS:-}" ] && [ -z "${SKIP_W4A8:-}" ]; then
  run $MOEGEN build --model "$MODEL" --arch sm90 --activations fp8 > "$OUT/build_w4a8.log" 2>&1
  run $MOEGEN sass --model "$MODEL" --activations fp8 > "$OUT/sass_w4a8.txt" 2>&1
fi
tail -1 "$OUT/sass_w4a8.txt" 2>/dev/null

step check  # every kernel of the build against the float64 reference
[ -n "${SKIP_CHECK:-}" ] || run $MOEGEN check --model "$MODEL" > "$OUT/check.log" 2>&1
tail -1 "$OUT/check.log" 2>/dev/null

step pytest
[ -n "${SKIP_PYTEST:-}" ] || run python3 -m pytest -m gpu tests/test_gpu_layer.py tests/test_gpu_timing.py -q -s ${PYTEST_K:+-k "$PYTEST_K"} \
  > "$OUT/pytest.log" 2>&1
grep -E "seed|passed|failed|Error" "$OUT/pytest.log" 2>/dev/null | tail -4
# the persistent grid, forced, on a model with short-K kernels (the layer picks it from 4096 expert rows)
[ -n "${SKIP_PYTEST:-}" ] || MOEGEN_GRID=persistent run python3 -m pytest -m gpu tests/test_gpu_layer.py -q \
  -k "layer_matches_reference and qwen3" > "$OUT/pytest_persistent.log" 2>&1
tail -1 "$OUT/pytest_persistent.log" 2>/dev/null

step sanitizer
[ -n "${SKIP_SANITIZER:-}" ] || run compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 tools/sanitize_run.py "generated/$MODEL/sm90" > "$OUT/sanitizer.log" 2>&1
tail -2 "$OUT/sanitizer.log" 2>/dev/null

step timeline  # each kernel's start and end inside one graph replay
[ -n "${SKIP_TIMELINE:-}" ] || run python3 tools/timeline.py "$MODEL" "${BENCH_TOKENS:-1,64,1024,4096}" \
  > "$OUT/timeline.txt" 2>&1

step bench
compare=()
for c in ${COMPARE:-}; do compare+=(--compare "$c"); done
[ -n "${SKIP_BENCH:-}" ] || run $MOEGEN bench --model "$MODEL" --tokens "${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384}" \
  "${compare[@]}" --json "$OUT/bench.json" > "$OUT/bench.md" 2> "$OUT/bench.log"
cat "$OUT/bench.md" 2>/dev/null
echo "gpu_check status $status"
exit $status
