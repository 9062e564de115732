#!/usr/bin/env bash
# Round u (2026-12-04, a third session): the whole W4A8 GPU test file (its batch invariance now crosses
# every bucket edge of each W4A8 table; round t ran only gpt-oss-120b --tp 2 W4A8), then round t's parts:
# whole tables for the W4A8 splits that still ran on the heuristic (Qwen3-30B-A3B --ep-size 4, --ep-size 8
# of both DeepSeek models; ROTATIONS=8 for the small buckets of the --ep-size 8 splits, whose few local rows
# make two routing draws a poor sample), and gpt-oss-20b --tp 2 BF16 between its x4 buckets.
# Libraries: generated/_gputest (lab/build_test_libs.py) and generated/_exp/mid (lab/mid_kernels.py),
# carried with lab/stage_carry.sh.
#   G8=1 [G8_K=expr] bash lab/round_20261204_u.sh [round t parts...]
#   MERGE="MODEL SPLIT... : OLD_BUCKETS : TEST_VARIANT" after the parts: lab/bench_verdict.py --merge of the
#       tuned table into configs/dispatch here (the buckets both bench orders confirm), then that BF16
#       variant's GPU tests on it (MOEGEN_TEST_KERNELS=default; builds link from the carried mid objects).
set -uo pipefail
source lab/device_env.sh
D=${OUT:-/tmp}
if [ -n "${G8:-}" ]; then
  (timeout -k 5 ${G8_LIMIT:-300} python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider -rs \
    ${G8_K:+-k "$G8_K"} 2>&1) > $D/G8.txt
  grep -E "seed|passed|failed|error" $D/G8.txt | tail -5
fi
[ $# -gt 0 ] && TOKENS=${TOKENS:-2,3,6,8,32,128,512,2048,8192} bash lab/round_20261204_s.sh "$@"
if [ -n "${MERGE:-}" ]; then
  IFS=: read -r problem old variant <<< "$MERGE"
  read -r model tp <<< "$problem"
  slug=$(python3 -c "from moegen.cli import _spec; from moegen.problem import ProblemKey; s=_spec('$model', ${tp:-1}, 1, 0, 'bf16'); print(s.variant, ProblemKey.of(s).slug)")
  read -r mv key <<< "$slug"
  python3 lab/bench_verdict.py /tmp/round_s/bench-$mv-{a,b}.json --merge /tmp/round_s/dispatch/sm90/nvidia-h200-132sm/$key.json \
    configs/dispatch/sm90/nvidia-h200-132sm/$key.json ${old// /}
  cp configs/dispatch/sm90/nvidia-h200-132sm/$key.json $D/
  ln -sfn _exp/mid/.objects generated/.objects
  (MOEGEN_TEST_KERNELS=default timeout -k 5 ${MERGE_TEST_LIMIT:-120} python3 -m pytest -m gpu tests/test_gpu_layer.py -q \
    -p no:cacheprovider -k "${variant// /}" 2>&1) > $D/GM.txt
  grep -E "seed|passed|failed|error" $D/GM.txt | tail -5
fi
exit 0
