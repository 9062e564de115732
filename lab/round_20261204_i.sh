#!/usr/bin/env bash
# Round i (2026-12-04): racecheck's hazards in Qwen3-30B-A3B's one-block routing kernel (round h, S),
# in full, on 5dedee8's W4A8 build, 9ae79c1's (before the named barriers) and 5dedee8's BF16 build.
set -uo pipefail
source lab/device_env.sh
D=${OUT:-/tmp}
for L in generated/_exp/fin/fin/qwen3-30b-a3b-w4a8/sm90 generated/_exp/ob/base/qwen3-30b-a3b-w4a8/sm90 \
         generated/_exp/fin/fin/qwen3-30b-a3b/sm90 generated/_exp/fin/fin/deepseek-v4-flash/sm90; do
  echo "== $L"
  timeout -k 5 150 compute-sanitizer --tool racecheck --racecheck-report all --kernel-name kns=route_one_block \
    python3 tools/sanitize_run.py $L 2>&1 | grep -v "^=========     Host Frame\|^=========         in " | head -60
done > $D/R.txt 2>&1
grep -E "^==|SUMMARY" $D/R.txt
