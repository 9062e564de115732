#!/usr/bin/env bash
# The sixth 2026-12-01 session, after `source lab/device_env.sh`: retune the five tables last tuned on
# kernels that all had the persistent tile loop (8c8421b, 41c264e), on their shortlists (carried
# builds), with the settled tuner.  Part 1: the tunes, compacted into configs/dispatch (raw and
# compacted tables in $OUT/results.tgz).  Part 2: the default build of configs/dispatch's tables
# (generated/_new, linked from the carried objects) benched against the previous tables' build
# (generated/_default, whose user tables are the previous ones); $OUT/bench.tgz.
#   bash lab/round_20261201_r.sh OUT 1|2|12
set -uo pipefail
OUT=$1
# model:split:variant (the build directory's name)
SPLITS=("deepseek-v4-flash:--ep-size+8+--ep-rank+0:deepseek-v4-flash-ep0of8" "deepseek-v3:--ep-size+8+--ep-rank+0:deepseek-v3-ep0of8"
        "gpt-oss-120b:--tp+2:gpt-oss-120b-tp2" "gpt-oss-20b::gpt-oss-20b" "gpt-oss-20b:--tp+2:gpt-oss-20b-tp2")
if [[ "$2" == *1* ]]; then
  steps=()
  for s in "${SPLITS[@]}"; do IFS=: read -r model split variant <<< "$s"; steps+=("tune:$model:shortlist:$split"); done
  # The shipped tables' eight buckets (without BUCKETS moegen tune times 15, and 110 s per table cut
  # every tune of the 2026-12-01 run short at T = 128 or 512).
  BUCKETS=1,4,16,64,256,1024,4096,16384 TUNE_OPTS="--rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 --settle-seconds 0.25" STEP_SECONDS=110 \
    bash lab/device_round.sh "$OUT" "${steps[@]}"
fi
if [[ "$2" == *2* ]]; then
  R=/tmp/round_r; rm -rf $R; mkdir -p $R
  for s in "${SPLITS[@]}"; do
    IFS=: read -r model split variant <<< "$s"; split=${split//+/ }
    timeout 60 python3 -m moegen build --model "$model" $split --arch sm90 --out generated/_new \
      --objects generated/.objects > "$R/build-$variant.log" 2>&1 || { echo "build $variant failed"; continue; }
    timeout 110 python3 -m moegen bench --model "$model" $split --out generated/_new \
      --compare "previous=generated/_default/$variant/sm90" \
      --tokens 1,4,16,64,256,1024,4096,16384 --reps 6 --warm-seconds 1 --json "$R/bench-$variant.json" \
      > "$R/bench-$variant.md" 2> "$R/bench-$variant.log"; echo "== $model $split: bench rc $?"
    grep -E "^\| (default|previous)" "$R/bench-$variant.md" | awk -F'|' '{print $2,$3,$4,$7}'
    tar czf "$OUT/bench.tgz" -C $R .
  done
fi
