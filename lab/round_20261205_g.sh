#!/usr/bin/env bash
# Round g (2026-12-05, a ninth session): the product end to end on a GPU machine after this session's
# build changes (the toolchain identity in every key, so nothing carried from here is reused there):
# the README's default build from an empty cache, `moegen sass`, `moegen check`, a rebuild that must be
# up to date, and the default model's GPU tests on that build.  Carry only the CUTLASS wheel:
#   rm -rf .carry && mkdir -p .carry/whl && cp .whl/nvidia_cutlass-*.whl .carry/whl/ && git rev-parse --short HEAD > .carry/commit.txt
#   VERIFY   (any SM90 GPU: it checks, it does not time)
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rc=0
M=deepseek-v4-flash
t0=$(date +%s)
python3 -m moegen build --model $M --arch sm90 -j 16 > $D/build.txt 2>&1 || rc=1
echo "build rc $rc in $(( $(date +%s) - t0 )) s"; tail -2 $D/build.txt
t0=$(date +%s)
python3 -m moegen build --model $M --arch sm90 -j 16 2>&1 | tail -2
echo "rebuild in $(( $(date +%s) - t0 )) s"
python3 -m moegen sass --model $M > $D/sass.txt 2>&1 || rc=1
tail -3 $D/sass.txt
timeout -k 5 150 python3 -m moegen check --model $M --tokens 0,1,2,7,33,300,2048,4097 > $D/check.txt 2>&1 || rc=1
tail -3 $D/check.txt
(MOEGEN_TEST_KERNELS=default timeout -k 5 300 python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider \
  -k "(deepseek-v4-flash and not ep1of8) or test_cuda_graph_replay or test_hash_routed_layer or test_input_checks" 2>&1) > $D/tests.txt || rc=1
grep -E "seed|passed|failed|error" $D/tests.txt | tail -4
exit $rc
