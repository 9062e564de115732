#!/usr/bin/env bash
# The 2026-12-01 (third) session's device run for issue 15, after `source lab/device_env.sh`: tune the
# T = 16384 bucket that the shipped DeepSeek-V4-Flash (whole space) and DeepSeek-V3 (shortlist) tables
# lack, merge it into them (lab/merge_tables.py: raw picks into generated/dispatch for the tuned
# libraries, compacted into configs/dispatch), then benchmark each model's default build against its
# tuned library in one run.  Results: $OUT/{a,b}/results.tgz and $OUT/tables.tgz.
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }
SHIPPED=configs/dispatch/sm90/nvidia-h200-132sm
USER=generated/dispatch/sm90/nvidia-h200-132sm
for job in deepseek-v4-flash:all:e256-l256-k6-h4096-i2048 deepseek-v3:shortlist:e256-l256-k8-h7168-i2048; do
  IFS=: read -r model kernels problem <<< "$job"
  echo "== tune $model T=16384 $(date +%T)"
  timeout -k 5 $(left $([ $model = deepseek-v3 ] && echo 260 || echo 200)) python3 -m moegen tune --model $model \
    --kernels $kernels --no-build --tolerance 0 --buckets 16384 \
    --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 > /tmp/tune-$model.log 2>&1
  echo "rc $?"; grep -E "T=|timings|Error" /tmp/tune-$model.log | tail -3
  cp /tmp/tune-$model.log "$OUT/"
  [ -f $USER/$problem.json ] || continue
  cp $USER/$problem.json "$OUT/raw16384-$model.json"
  python3 lab/merge_tables.py $USER/$problem.json $SHIPPED/$problem.json "$OUT/raw16384-$model.json" | tail -1
  python3 lab/compact_table.py $USER/$problem.json configs/dispatch
done
tar czf "$OUT/tables.tgz" configs/dispatch generated/dispatch
STEP_SECONDS=$(left 420) bash lab/device_round.sh "$OUT/a" bench:deepseek-v4-flash | grep -vE "^\s*$" | tail -14
STEP_SECONDS=$(left 580) bash lab/device_round.sh "$OUT/b" bench:deepseek-v3 | grep -vE "^\s*$" | tail -14
echo "round done in $(( $(date +%s) - t0 )) s"
