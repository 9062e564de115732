#!/usr/bin/env bash
# Round j (2026-12-04): is round i's racecheck hazard (schedule_block's offsets write, the scatter's
# read, a block barrier between them) a false positive of named subset barriers?
# lab/experiments/racecheck_named_barrier.cu in its three modes under racecheck.
set -uo pipefail
D=${OUT:-/tmp}
nvcc -arch=sm_90a -lineinfo -o /tmp/rc lab/experiments/racecheck_named_barrier.cu || exit 1
(for m in 0 1 2; do echo "== mode $m"
   compute-sanitizer --tool racecheck --racecheck-report all /tmp/rc $m 2>&1 | grep -E "mode|hazard|Error|Thread|SUMMARY" | head -12
 done) > $D/J.txt 2>&1; cat $D/J.txt
