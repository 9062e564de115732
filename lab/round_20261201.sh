#!/usr/bin/env bash
# The 2026-12-01 session's last device run (after `source lab/device_env.sh`): finish the full-space
# DeepSeek-V4-Flash table with the buckets the first run did not reach (merged with its small-T
# half), tune the shortlists of the EP-8 split and both gpt-oss models, compact every table into
# configs/dispatch, build the default kernels, benchmark default against tuned, run the GPU tests
# of the default model.  Results: $OUT/results.tgz (lab/device_round.sh) and $OUT/tables.tgz.
set -uo pipefail
OUT=$1
export TUNE_OPTS="--rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5"
BUCKETS=4096,16384 STEP_SECONDS=150 bash lab/device_round.sh $OUT/a tune:deepseek-v4-flash:all | grep -E "==|T=|timings"
raw=generated/dispatch/sm90/nvidia-h200-132sm/e256-l256-k6-h4096-i2048.json
python3 lab/merge_tables.py $raw lab/carried/dsv4-raw-small-buckets.json $raw
python3 lab/compact_table.py $raw configs/dispatch
BUCKETS=1,4,16,64,256,1024,4096,16384 STEP_SECONDS=90 bash lab/device_round.sh $OUT/b \
  "tune:deepseek-v4-flash:shortlist:--ep-size+8+--ep-rank+0" tune:gpt-oss-120b:shortlist tune:gpt-oss-20b:shortlist \
  | grep -E "==|timings|compacted"
tar czf $OUT/tables.tgz configs/dispatch generated/dispatch
STEP_SECONDS=120 bash lab/device_round.sh $OUT/c bench:deepseek-v4-flash bench:gpt-oss-120b | grep -vE "^\s*$" | tail -24
STEP_SECONDS=100 bash lab/device_round.sh $OUT/d "tests:deepseek-v4-flash and not every_kernel" | tail -6
