#!/usr/bin/env bash
# The 2026-12-01 (second) session's first device run, after `source lab/device_env.sh`: build the
# shortlist of every shipped GEMM problem but DeepSeek-V4-Flash's (built on this 2-core machine)
# with all 16 cores, send the new objects back ($OUT/objects.tar.xz: later runs carry them), then
# tune the shipped splits on the shortlist, each step capped so that a slow one cannot eat the rest.
set -uo pipefail
OUT=$1; mkdir -p "$OUT/logs"
t0=$(date +%s); touch /tmp/round_start
b() { python3 -m moegen build --arch sm90 --kernels shortlist -j4 "$@" > "$OUT/logs/build-$(echo "$*" | tr -c 'a-z0-9-' '_').log" 2>&1 \
        || echo "build $* failed: $(tail -1 "$OUT/logs/build-$(echo "$*" | tr -c 'a-z0-9-' '_').log")"; }
# One build per GEMM problem at a time (objects are shared by content; two builds of one problem
# would compile the same objects twice), four at once.
b --model deepseek-v3 & b --model gpt-oss-20b & b --model gpt-oss-120b --tp 2 & b --model qwen3-30b-a3b & wait
b --model deepseek-v3 --ep-size 8 --ep-rank 0 & b --model gpt-oss-20b --tp 2 & b --model gpt-oss-120b & wait
echo "builds done in $(( $(date +%s) - t0 )) s"
grep -h "s, .*registers" "$OUT"/logs/build-*.log | sort -t: -k2 -n | tail -3
find generated/.objects -type f -newer /tmp/round_start -print0 | tar cf - --null -T - | xz -T16 -3 > "$OUT/objects.tar.xz"
ls -la "$OUT/objects.tar.xz"
export TUNE_OPTS="--rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5" BUCKETS=1,4,16,64,256,1024,4096,16384
for target in deepseek-v3:shortlist gpt-oss-20b:shortlist qwen3-30b-a3b:shortlist gpt-oss-120b:shortlist:--tp+2 \
              deepseek-v3:shortlist:--ep-size+8+--ep-rank+0 gpt-oss-20b:shortlist:--tp+2; do
  left=$(( 570 - ($(date +%s) - t0) ))
  [ $left -gt 30 ] || { echo "skipped $target: ${left}s left"; continue; }
  STEP_SECONDS=$(( left < 75 ? left : 75 )) bash lab/device_round.sh "$OUT/t-${target%%:*}-$(echo "$target" | cut -d: -f3 | tr -c 'a-z0-9\n' '_')" "tune:$target" \
    | grep -E "==|T=|timings|compacted|Error"
done
echo "round done in $(( $(date +%s) - t0 )) s"
