#!/usr/bin/env bash
# Round i (2026-12-03):
#   W   BF16 consumers issuing each k16 block's wgmmas as soon as it is widened
#       (lab/experiments/run_widen_and_issue.sh): bit for bit against the shipped mainloop, then
#       `moegen bench` of both, base listed first.
#   W2  the same bench, the interleaved library listed first.
# Each part's output goes to $OUT/<part>.txt (DEVICE_OUT) and its tail to stdout.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
for part in "$@"; do
case $part in
W) (bash lab/experiments/run_widen_and_issue.sh bitwise; DEVICE_OUT=$D bash lab/experiments/run_widen_and_issue.sh run) > $D/W.txt 2>&1
   tail -40 $D/W.txt ;;
W2) DEVICE_OUT=$D bash lab/experiments/run_widen_and_issue.sh run_reversed > $D/W2.txt 2>&1; tail -30 $D/W2.txt ;;
*) echo "unknown part $part" ;;
esac
done
