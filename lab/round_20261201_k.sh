#!/usr/bin/env bash
# The 2026-12-01 (fourth) session's first device run, after `source lab/device_env.sh`: the GEMMs run
# one CTA per tile (no persistent grid).  Tune DeepSeek-V4-Flash's whole space (built here, carried)
# at every bucket, compact the table into configs/dispatch, build the new default kernels, and bench
# them against the previous commit's default build (generated/_old, carried) in one run.
# Results: $OUT/a/results.tgz (tune, shipped table), $OUT/bench.{md,json}.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
BUCKETS=1,4,16,64,256,1024,4096,16384 TUNE_OPTS="--rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5" STEP_SECONDS=$(left 330) \
  bash lab/device_round.sh "$OUT/a" tune:deepseek-v4-flash:all | grep -vE "^\s*$" | tail -12
timeout -k 5 60 python3 -m moegen build --model deepseek-v4-flash --arch sm90 --out generated/_default \
  --objects generated/.objects > "$OUT/build.log" 2>&1; echo "build rc $?"; tail -1 "$OUT/build.log"
timeout -k 5 $(left 575) python3 -m moegen bench --model deepseek-v4-flash --out generated/_default \
  --compare old=generated/_old/deepseek-v4-flash/sm90 --tokens 1,4,16,64,256,1024,4096,16384 --reps 10 \
  --json "$OUT/bench.json" > "$OUT/bench.md" 2> "$OUT/bench.log"; echo "bench rc $?"
cat "$OUT/bench.md"
echo "round done in $(( $(date +%s) - t0 )) s"
