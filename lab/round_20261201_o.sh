#!/usr/bin/env bash
# The fifth 2026-12-01 session's first device runs, after `source lab/device_env.sh`: every shipped table
# not yet retuned on 61b8390's kernels (the persistent grid now only for K loops of at most 12 tiles),
# retuned on its problem's shortlist as before.  `build` compiles every shortlist here (16 cores, three
# chains at once; the object store stays on the warm machine for the next call); `tune PROBLEM...`
# tunes and compacts each into configs/dispatch (lab/device_round.sh), one call's worth at a time.
#   bash lab/round_20261201_o.sh OUT build|tune [STEP...]
set -uo pipefail
OUT=$1; what=$2; shift 2; mkdir -p "$OUT"
if [ "$what" = build ]; then
  b() { python3 -m moegen build --arch sm90 --kernels shortlist "$@" > "$OUT/build-$(echo "$*" | tr -c 'a-z0-9-' _).log" 2>&1 \
          || echo "FAILED build $*"; }
  t0=$(date +%s)
  ( b --model deepseek-v3 -j 6; b --model deepseek-v3 --ep-size 8 --ep-rank 0 -j 6 ) &
  ( b --model deepseek-v4-flash --ep-size 8 --ep-rank 0 -j 5; b --model qwen3-30b-a3b -j 5 ) &
  ( b --model gpt-oss-120b --tp 2 -j 5; b --model gpt-oss-20b -j 5; b --model gpt-oss-20b --tp 2 -j 5 ) &
  wait; echo "shortlist builds in $(( $(date +%s) - t0 )) s"
  grep -h "SERIALIZED" "$OUT"/build-*.log | wc -l
  exit 0
fi
BUCKETS=1,4,16,64,256,1024,4096,16384 TUNE_OPTS="--rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5" \
  STEP_SECONDS=${STEP_SECONDS:-150} bash lab/device_round.sh "$OUT/tune" "$@"
mkdir -p "$OUT/configs" && cp -r configs/dispatch "$OUT/configs/"
