#!/usr/bin/env bash
# One GPU session's check, the same every time: build (no-op when the carried generated/ matches by
# fingerprint), SASS audit, GPU tests, compute-sanitizer, tune, benchmark. Results go to $1 (default
# results/). SKIP_BUILD, SKIP_PYTEST, SKIP_SANITIZER, SKIP_TUNE, SKIP_BENCH, SKIP_TIMELINE leave a step out.
# The GPU tests (default model) and the benchmark run once more with the GEMM grid forced to
# ALT_GRID (default persistent: the layer's own choice is one CTA per tile below 4096 expert rows),
# so both grids stay tested; SKIP_ALT_BENCH leaves that bench out.
# Here: `bash tools/stage_carry.sh`; device tool: carry [".carry"], run
# `PACK_RESULTS=1 bash tools/gpu_check.sh $OUT` (one results.tgz: the tool returns at most 8 files).
# The GPU tests build what they need under generated/_gputest when it was not carried.
set -uo pipefail
OUT=${1:-results}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
source tools/device_env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
echo "$MOEGEN_COMMIT" > "$OUT/commit.txt"  # device_env.sh: the staged commit
status=0
step() { echo "== $1"; }

step build  # no-op for whatever was carried with a matching fingerprint
if [ -z "${SKIP_BUILD:-}" ]; then
  python3 tools/build_test_libs.py > "$OUT/build.log" 2>&1 &
  python3 -m moegen build --model deepseek-v4-flash --arch sm90 --kernels all >> "$OUT/build_all.log" 2>&1 || status=1
  wait $! || status=1
  tail -2 "$OUT/build_all.log"; cat "$OUT/build.log"
fi

step sass
for lib in generated/*/sm90/libmoegen-*.so generated/_gputest/*/sm90/libmoegen-*.so; do
  [ -e "$lib" ] || continue  # an unmatched glob (e.g. no test builds when SKIP_BUILD)
  echo "# $lib"; cuobjdump --dump-sass "$lib" | python3 tools/sass_audit.py || echo "SASS AUDIT FAILED: $lib"
done > "$OUT/sass.txt" 2>&1
# ptxas advisories C751x (wgmma serialized; C7512: registers, C7513: wgmma inputs written mid-pipeline)
# are listed for every built kernel, and the dispatch table's picks among them after the tune step.
# Not a failure: one-warpgroup kernels serialized at 3-5 CTAs per SM beat their unserialized builds
# at 2 (H200, 27b50d6), so the tuner arbitrates.
python3 tools/serialized_kernels.py generated/*/sm90 generated/_gputest/*/sm90 | \
  sed 's/^/WGMMA SERIALIZED: /' >> "$OUT/sass.txt"
grep -c "FAILED" "$OUT/sass.txt" && status=1
grep -h "grouped_gemm" "$OUT/sass.txt" | head -4

step pytest
# PYTEST_K selects tests by a -k expression (spaces allowed); PYTEST_ARGS adds other words.
[ -n "${SKIP_PYTEST:-}" ] || python3 -m pytest -m gpu tests/test_gpu_layer.py -q -x -s ${PYTEST_K:+-k "$PYTEST_K"} \
  ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1 || status=1
grep -E "rel L2|passed|failed|Error" "$OUT/pytest.log" 2>/dev/null | tail -12
[ -n "${SKIP_PYTEST:-}" ] || MOEGEN_GRID=${ALT_GRID:-persistent} python3 -m pytest -m gpu tests/test_gpu_layer.py -q -x -s \
  -k "deepseek-v4-flash" > "$OUT/pytest_alt_grid.log" 2>&1 || status=1
grep -E "passed|failed|Error" "$OUT/pytest_alt_grid.log" 2>/dev/null | tail -3

step sanitizer
if [ -z "${SKIP_SANITIZER:-}" ]; then
  compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py > "$OUT/sanitizer.log" 2>&1 || status=1
  tail -3 "$OUT/sanitizer.log"
fi

step tune
if [ -z "${SKIP_TUNE:-}" ]; then  # the default model's library as built/carried (build --kernels all first)
  python3 -m moegen tune --model deepseek-v4-flash --no-build ${TUNE_BUCKETS:+--buckets $TUNE_BUCKETS} > "$OUT/tune.log" 2>&1 || status=1
  tail -16 "$OUT/tune.log"
  cp generated/deepseek-v4-flash/sm90/dispatch/*.json "$OUT/" 2>/dev/null
fi
python3 tools/serialized_kernels.py --picked generated/deepseek-v4-flash/sm90 | \
  sed 's/^/PICKED, WGMMA SERIALIZED: /' | tee -a "$OUT/sass.txt"

step bench
[ -n "${SKIP_BENCH:-}" ] || python3 -m moegen bench --model deepseek-v4-flash --tokens ${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384} \
  --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -12 || status=1
[ -n "${SKIP_BENCH:-}${SKIP_ALT_BENCH:-}" ] || MOEGEN_GRID=${ALT_GRID:-persistent} python3 -m moegen bench \
  --model deepseek-v4-flash --tokens ${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384} --json "$OUT/bench_alt_grid.json" \
  2>&1 | tee "$OUT/bench_alt_grid.log" | tail -9 || status=1
step timeline  # per-kernel start/end inside one graph replay (routing, GEMMs, finalize, PDL overlap)
[ -n "${SKIP_TIMELINE:-}" ] || python3 tools/timeline.py deepseek-v4-flash ${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384} \
  > "$OUT/timeline.txt" 2>&1 || status=1
if [ -n "${PACK_BUILDS:-}" ]; then  # the built libraries, to carry into the next call (tools/stage_carry.sh layout)
  find generated \( -name manifest.json -o -name 'libmoegen-*.so' -o -path '*/dispatch/*' -o -path '*/logs/*' \) \
    -print0 | tar czf "$OUT/generated.tgz" --null -T -
fi
# The device tool brings back at most 8 files from $OUT: PACK_RESULTS=1 packs everything into one.
if [ -n "${PACK_RESULTS:-}" ]; then
  tar czf /tmp/gpu_check_results.tgz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && \
    mv /tmp/gpu_check_results.tgz "$OUT/results.tgz"
fi
echo "gpu_check status $status"
exit $status
