#!/usr/bin/env bash
# Round q (2026-12-04, a second session): W4A8's small-T buckets of the three other shipped W4A8 tables
# (gpt-oss-20b, DeepSeek-V4-Flash, DeepSeek-V3; buckets 1, 4, 16 so far, so T = 2, 3, 6 and 8 borrowed a
# neighbour's pair) retuned at T = 1, 2, 3, 4, 6, 8 as round o did for the other two, on the same twelve
# one-slice k128 tiles (generated/_exp/rt), then W4A8 against W4A16 up to T = 8 (issue 21's small-T bar).
#   T MODEL          round o's part T: tune, cut the new and the shipped table to T <= 8, bench both orders
#   W MODEL W4A16    the new picks (generated/_exp/rt with its user table, which part T writes: run T first on
#                    the same machine) against W4A16 (a BF16 build), one `moegen bench` run, T = 1, 2, 3, 4, 6, 8
set -uo pipefail
source lab/device_env.sh
D=${OUT:-/tmp}
for part in "$@"; do
  read -r what model base <<< "$part"
  case $what in
  T) bash lab/round_20261204_o.sh "T $model" ;;
  W) echo "== $model"
     timeout -k 5 150 python3 -m moegen bench --model $model --activations fp8 --out generated/_exp/rt \
       --compare w4a16=$base --tokens 1,2,3,4,6,8 --rounds 4 --json $D/q_$model.json | grep -E " T=|ceiling" ;;
  *) echo "unknown part $part" ;;
  esac
done
