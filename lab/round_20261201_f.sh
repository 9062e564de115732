#!/usr/bin/env bash
# The 2026-12-01 (third) session's second device run, after `source lab/device_env.sh`: issue 15's bar
# with the completed tables (the default build against the tuned library, alternating windows per T),
# for DeepSeek-V4-Flash (tuned over the whole space) and DeepSeek-V3 (shortlist), then the GPU suite.
# Results: $OUT/{a,b,t}/results.tgz.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
USER=generated/dispatch/sm90/nvidia-h200-132sm
mkdir -p $USER && cp .carry/raw/*.json $USER/  # the raw (tolerance-0) tables: the tuned libraries' picks
STEP_SECONDS=$(left 200) bash lab/device_round.sh "$OUT/a" bench:deepseek-v4-flash | grep -vE "^\s*$" | head -19
STEP_SECONDS=$(left 380) bash lab/device_round.sh "$OUT/b" bench:deepseek-v3 | grep -vE "^\s*$" | head -19
STEP_SECONDS=$(left 570) bash lab/device_round.sh "$OUT/t" tests
echo "round done in $(( $(date +%s) - t0 )) s"
