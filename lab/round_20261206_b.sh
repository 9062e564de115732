#!/usr/bin/env bash
# Round b (2026-12-06): compute-sanitizer memcheck on the kernels as they are now (the routing's
# underflow and signed-zero handling, the C ABI's checks, 4077982's quantizer trigger and d66050d's
# ld.cg reads came after the last memcheck), and, on an H200 only, round i's two widest gaps between a
# shipped pick and its searched pair (qwen3-30b-a3b --ep-size 4 at T = 2, deepseek-v3 at T = 4 and 1024).
# Carry only the CUTLASS wheel (rm -rf .carry && mkdir -p .carry/whl && cp .whl/nvidia_cutlass-*.whl
# .carry/whl/ && git rev-parse --short HEAD > .carry/commit.txt).
#   bash lab/round_20261206_b.sh
# The sanitizer's builds (DeepSeek-V4-Flash BF16 and W4A8, default kernels) compile at nice 19 while the
# tables are benched: the benches time CUDA-graph replays, which the host's load does not enter.
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}; S=generated/_san
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rc=0
for act in bf16 fp8; do
  nice -n 19 python3 -m moegen build --model deepseek-v4-flash --activations $act --arch sm90 --out $S -j 8 \
    > $D/build-san-$act.txt 2>&1 &
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout -k 5 ${TABLES_LIMIT:-330} bash lab/round_20261205_i.sh "qwen3-30b-a3b bf16 1 4 0 2" \
    "deepseek-v3 bf16 1 1 0 4,1024" || rc=1
fi
wait || rc=1
for v in deepseek-v4-flash deepseek-v4-flash-w4a8; do
  [ -f $S/$v/sm90/manifest.json ] || { echo "$v: not built"; tail -3 $D/build-san-*.txt; rc=1; continue; }
  timeout -k 5 ${SAN_LIMIT:-110} compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py \
    $S/$v/sm90 > $D/memcheck-$v.txt 2>&1 || rc=1
  echo "$v: $(grep -E 'ERROR SUMMARY' $D/memcheck-$v.txt | tail -1)"
done
exit $rc
