#!/usr/bin/env bash
# Round h (2026-12-04): checks of 5510bba's named barriers and 5dedee8's finalize, and finalize at large T.
#   S   compute-sanitizer on W4A8 builds (generated/_exp/fin/fin, 5dedee8's sources) of DeepSeek-V4-Flash
#       and Qwen3-30B-A3B through tools/sanitize_run.py (one-block routing at T = 3 and 8): memcheck over
#       every kernel, racecheck and synccheck on the one-block routing kernel.
#   P   `moegen bench`, DeepSeek-V4-Flash BF16, 5dedee8 against 5510bba, T = 256, 1024, 4096, both orders
#       (round g had 5dedee8 1.8 % slower at 1024 in both orders, within the bench's noise).
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
F=generated/_exp/fin
for part in "$@"; do
case $part in
S) (for M in deepseek-v4-flash qwen3-30b-a3b; do L=$F/fin/$M-w4a8/sm90
      echo "== $M memcheck"; timeout -k 5 200 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py $L 2>&1 | tail -3
      for tool in racecheck synccheck; do echo "== $M $tool (route_one_block)"
        timeout -k 5 150 compute-sanitizer --tool $tool --error-exitcode 1 --kernel-name kns=route_one_block \
          python3 tools/sanitize_run.py $L 2>&1 | tail -3
      done
    done) > $D/S.txt 2>&1; cat $D/S.txt ;;
P) (M=deepseek-v4-flash
    timeout -k 5 250 python3 -m moegen bench --model $M --out $F/fin --compare head=$F/head/$M/sm90 --tokens 256,1024,4096 --rounds 4 | grep -E " T=|ceiling"
    timeout -k 5 250 python3 -m moegen bench --model $M --out $F/head --compare fin=$F/fin/$M/sm90 --tokens 256,1024,4096 --rounds 4 | grep -E " T=|ceiling"
   ) > $D/P.txt 2>&1; cat $D/P.txt ;;
*) echo "unknown part $part" ;;
esac
done
