#!/usr/bin/env bash
# Round a (2026-12-06): the first GPU run of 500bac2, 16fe66c and 37d3b80 (routing's underflow and
# signed-zero handling, the C ABI's pointer checks).  Any SM90 GPU: it checks, it does not time.
# Carry only the CUTLASS wheel:
#   rm -rf .carry && mkdir -p .carry/whl && cp .whl/nvidia_cutlass-*.whl .carry/whl/ && git rev-parse --short HEAD > .carry/commit.txt
#   NEW     the two new routing tests (builds the libraries they need)
#   SUITE   the whole GPU suite; a first call on a fresh machine mostly compiles, call it again
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export MOEGEN_TEST_KERNELS=default
rc=0
case $1 in
NEW)
  (timeout -k 5 ${LIMIT:-300} python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider \
    -k "underflow or signed_zero" 2>&1) > $D/tests-new.txt || rc=1
  grep -E "seed|passed|failed|error" $D/tests-new.txt | tail -6 ;;
SUITE)
  (timeout -k 5 ${LIMIT:-560} python3 -m pytest -m gpu tests/ -q -p no:cacheprovider 2>&1) > $D/tests-suite.txt || rc=1
  grep -E "seed|passed|failed|error|FAILED" $D/tests-suite.txt | tail -12 ;;
esac
exit $rc
