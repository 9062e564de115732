#!/usr/bin/env bash
# The 2026-12-01 (fourth) session's third device run, after `source lab/device_env.sh`: build
# gpt-oss-120b's whole space here (61b8390: its k64s4 kernels no longer serialized), retune it over
# the whole space (its table was tuned on a 16-kernel shortlist), compact the tables into configs/dispatch, build the new default
# kernels, and bench them against the previous table's picks built from the same templates
# (generated/_oldtable, dispatching by the previous table) in one run per model.
# Results: $OUT/<model>/results.tgz (tune, shipped table), $OUT/bench-<model>.{md,json}.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
timeout 300 python3 -m moegen build --model gpt-oss-120b --arch sm90 --kernels all -j 16 > "$OUT/build-all.log" 2>&1
echo "whole-space build rc $? in $(( $(date +%s) - t0 )) s"; grep -c SERIALIZED "$OUT/build-all.log"
cp generated/gpt-oss-120b/sm90/manifest.json "$OUT/manifest-gpt-oss-120b-all.json"
for job in gpt-oss-120b:all:e128-l128-k4-h2880-i2880:575; do
  IFS=: read -r model kernels problem until <<< "$job"
  table=configs/dispatch/sm90/nvidia-h200-132sm/$problem.json
  mkdir -p generated/_oldtable/dispatch/sm90/nvidia-h200-132sm
  cp $table generated/_oldtable/dispatch/sm90/nvidia-h200-132sm/
  old=$(python3 -c "import json,sys; t=json.load(open('$table')); print(','.join(sorted({b[g] for b in t['buckets'] for g in ('gemm1','gemm2')})))")
  python3 -m moegen build --model $model --arch sm90 --kernels $old --out generated/_oldtable --objects generated/.objects \
    > "$OUT/build-old-$model.log" 2>&1; echo "$model old-table build rc $?"
  BUCKETS=1,4,16,64,256,1024,4096,16384 TUNE_OPTS="--rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5" \
    STEP_SECONDS=$(left $((until - 150))) bash lab/device_round.sh "$OUT/$model" tune:$model:$kernels | grep -vE "^\s*$" | tail -11
  timeout -k 5 60 python3 -m moegen build --model $model --arch sm90 --out generated/_default --objects generated/.objects \
    > "$OUT/build-$model.log" 2>&1; echo "build rc $?"
  timeout -k 5 $(left $until) python3 -m moegen bench --model $model --out generated/_default \
    --compare oldtable=generated/_oldtable/$model/sm90 --tokens 1,4,16,64,256,1024,4096,16384 --reps 10 --warm-seconds 3 \
    --json "$OUT/bench-$model.json" > "$OUT/bench-$model.md" 2> "$OUT/bench-$model.log"; echo "bench rc $?"
  grep -E "^\||ceilings" "$OUT/bench-$model.md"
done
echo "round done in $(( $(date +%s) - t0 )) s"
