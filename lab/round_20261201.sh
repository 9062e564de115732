#!/usr/bin/env bash
# The 2026-12-01 session's last device run (after `source lab/device_env.sh`): finish the full-space
# DeepSeek-V4-Flash table with the buckets the first run did not reach (merged with its small-T
# half), compact it into configs/dispatch, build the default kernels and benchmark them against the
# tuned full space in one run; then, with what time is left, the gpt-oss-120b shortlist.
set -uo pipefail
OUT=$1
mkdir -p $OUT
export TUNE_OPTS="--rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5"
BUCKETS=4096,16384 STEP_SECONDS=170 bash lab/device_round.sh $OUT/a tune:deepseek-v4-flash:all | grep -E "==|T=|timings|Error"
raw=generated/dispatch/sm90/nvidia-h200-132sm/e256-l256-k6-h4096-i2048.json
python3 lab/merge_tables.py $raw lab/carried/dsv4-raw-small-buckets.json $raw && python3 lab/compact_table.py $raw configs/dispatch
tar czf $OUT/tables.tgz configs/dispatch generated/dispatch
STEP_SECONDS=130 bash lab/device_round.sh $OUT/c bench:deepseek-v4-flash | grep -vE "^\s*$" | tail -22
BUCKETS=1,16,64,256,1024,4096 STEP_SECONDS=100 bash lab/device_round.sh $OUT/b tune:gpt-oss-120b:shortlist | grep -E "==|T=|timings|compacted"
tar czf $OUT/tables.tgz configs/dispatch generated/dispatch
