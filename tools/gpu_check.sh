#!/usr/bin/env bash
# One GPU session's check, the same every time: build (no-op when the carried generated/ matches by
# fingerprint), SASS audit, GPU tests, compute-sanitizer, benchmark. Results go to $1 (default results/).
# On the device tool: carry [".whl", "generated"] and run `bash tools/gpu_check.sh $OUT`.
set -uo pipefail
OUT=${1:-results}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/moegen-site .whl/*.whl || exit 1
  export PYTHONPATH=$PWD:/tmp/moegen-site
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
echo "${MOEGEN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" > "$OUT/commit.txt"
status=0
step() { echo "== $1"; }

step build
for v in "deepseek-v4-flash" "deepseek-v3" "gpt-oss-120b" "gpt-oss-20b" "qwen3-30b-a3b" \
         "gpt-oss-20b --tp 2" "qwen3-30b-a3b --ep-size 4 --ep-rank 1"; do
  python3 -m moegen build --model $v --arch sm90 -j 16 || status=1
done 2>&1 | tee "$OUT/build.log"

step sass
for lib in generated/*/sm90/libmoegen-*.so; do
  echo "# $lib"; cuobjdump --dump-sass "$lib" | python3 tools/sass_audit.py || echo "SASS AUDIT FAILED: $lib"
done > "$OUT/sass.txt" 2>&1
grep -c "FAILED" "$OUT/sass.txt" && status=1
grep -h "grouped_gemm" "$OUT/sass.txt" | head -4

step pytest
python3 -m pytest -m gpu tests/test_gpu_layer.py -q -x -s ${PYTEST_ARGS:-} > "$OUT/pytest.log" 2>&1 || status=1
grep -E "rel L2|passed|failed|Error" "$OUT/pytest.log" | tail -12

step sanitizer
if [ -z "${SKIP_SANITIZER:-}" ]; then
  compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py > "$OUT/sanitizer.log" 2>&1 || status=1
  tail -3 "$OUT/sanitizer.log"
fi

step bench
python3 -m moegen bench --model deepseek-v4-flash --tokens ${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384} \
  --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -12 || status=1
echo "gpu_check status $status"
exit $status
