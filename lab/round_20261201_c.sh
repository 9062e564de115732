#!/usr/bin/env bash
# The 2026-12-01 (second) session's DeepSeek-V4-Flash device run, after `source lab/device_env.sh`:
# tune the whole 108-kernel space at the benchmark's token counts, compact it into the shipped table,
# build the default kernels (the new table's picks) from the carried objects and benchmark them
# against the tuned full space in one run (issue 15's bar), then tune the EP-8 split on the shortlist.
# Results: $OUT/{a,b,c}/results.tgz; the compacted table is also kept in /tmp/keep for the next call.
set -uo pipefail
OUT=$1
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
export TUNE_OPTS="--rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5"
BUCKETS=1,4,16,64,256,1024,4096,16384 STEP_SECONDS=$(left 320) bash lab/device_round.sh "$OUT/a" tune:deepseek-v4-flash:all \
  | grep -E "==|T=|timings|compacted|Error"
mkdir -p /tmp/keep && cp -r configs/dispatch /tmp/keep/
STEP_SECONDS=$(left 490) bash lab/device_round.sh "$OUT/b" bench:deepseek-v4-flash | grep -vE "^\s*$" | tail -22
BUCKETS=1,4,16,64,256,1024,4096,16384 STEP_SECONDS=$(left 545) bash lab/device_round.sh "$OUT/c" \
  tune:deepseek-v4-flash:shortlist:--ep-size+8+--ep-rank+0 | grep -E "==|T=|timings|compacted|Error"
cp -r configs/dispatch /tmp/keep/
echo "round done in $(( $(date +%s) - t0 )) s"
