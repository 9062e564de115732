#!/usr/bin/env bash
# Round p (2026-12-04): issue 21's small-T bar on the retuned W4A8 tables (round o): W4A8 with the new
# picks (generated/_exp/rt, its user table = the new shipped table's T <= 8 buckets) against W4A16
# (5dedee8's default BF16 builds, generated/_exp/fin/fin), one `moegen bench` run per model.  The user
# table must be there: without it the runtime refuses the shipped table (its T >= 16 picks are not in
# this library) and dispatches by the block_n heuristic (the first run did, s8 + s8 at every T).
set -uo pipefail
source lab/device_env.sh
D=${OUT:-/tmp}
for M in qwen3-30b-a3b gpt-oss-120b; do echo "== $M"
  timeout -k 5 120 python3 -m moegen bench --model $M --activations fp8 --out generated/_exp/rt \
    --compare w4a16=generated/_exp/fin/fin/$M/sm90 --tokens 1,2,3,4,6,8 --rounds 4 --json $D/p_$M.json | grep -E " T=|ceiling"
done
