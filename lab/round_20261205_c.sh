#!/usr/bin/env bash
# Round c (2026-12-05, the sixth session): the whole GPU test suite at ABI 3 (the batched entry point's
# first GPU run among it), the batched-against-experts look, then round b's SPECS.  Libraries: every GPU
# test variant built here with MOEGEN_TEST_KERNELS=default (`python lab/build_test_libs.py --sequential`)
# and the unshipped specs under generated/_new, staged with
#   bash lab/stage_carry.sh generated/_gputest generated/_new generated/.objects
# so the device only loads them (carry [".carry"]).
#   TESTS     pytest -m gpu tests/ (every variant; TESTS_LIMIT, default 500 s: 420 s reached ~95 % on an H100) and lab/batched_vs_experts.py
#             on DeepSeek-V4-Flash --ep-size 8
#   SPECS M.. round b's SPECS (CHECK_LIMIT, CHECK_TOKENS)
# First call: TESTS alone (about 9 minutes with the batched look); then SPECS, two models a call,
# each call within the device's idle release (30 s) of the one before.
# Ran (2026-12-05, an H100, at b5d7a89): TESTS (cut at its limit at ~95 %; the 3 failures were the batched
# num_tokens = 0 case, fixed in 05601d4; round d's TESTS reran the whole suite at 7c6b414: passed) and SPECS of all
# four models (passed).
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
rc=0
case ${1:-TESTS} in
TESTS)
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $D/gpu.txt
  (MOEGEN_TEST_KERNELS=default timeout -k 5 ${TESTS_LIMIT:-500} python3 -m pytest -m gpu tests/ -q -p no:cacheprovider \
    -rs 2>&1) > $D/tests-gpu.txt || rc=1
  grep -E "seed|passed|failed|error" $D/tests-gpu.txt | tail -4
  timeout -k 5 60 python3 lab/batched_vs_experts.py generated/_gputest/deepseek-v4-flash-ep1of8/sm90 \
    8,64,512,2048,8192 > $D/bve.txt 2>&1 || rc=1
  tail -8 $D/bve.txt ;;
SPECS)
  bash lab/round_20261205_b.sh "$@" || rc=1 ;;
*) echo "unknown part $1"; exit 2 ;;
esac
exit $rc
