#!/usr/bin/env bash
# Round r (2026-12-04, a second session): the BF16 tables' small-T buckets retuned.  Every shipped BF16
# table was tuned at buckets 1, 4, 16 only, so T = 2, 3, 6 and 8 borrow a neighbour's pair (gpt-oss-20b's
# W4A16 took 52.8 us at T = 2 in round q against 37.2 at T = 1 and 61.3 at T = 3).  Round o's part T on
# BF16: a library of the one-slice k128 tiles (m64 n8 / n16, s4 / s6 / s8, both GEMMs, and GEMM2
# m64n32k128s4 where K allows it, the shipped T = 1 pick of DeepSeek-V4-Flash and Qwen3-30B-A3B;
# generated/_exp/rb), `moegen tune --buckets 1,2,3,4,6,8` with the shipped tuner settings, then the new
# table against the shipped one on that library (each cut to T <= 8 as its root's user table), both orders.
#   T MODEL   tune, cut, bench (T = 1, 2, 3, 4, 6, 8, `--rounds 4`)
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
R=/tmp/round_r; mkdir -p $R
LIB=generated/_exp/rb
[ -d $R/dispatch ] || cp -r configs/dispatch $R/dispatch
cut_table() {  # cut_table TABLES MODEL DEST_ROOT: the W4A8 variant's table from TABLES, buckets <= 8, as DEST_ROOT's user table
  python3 - "$@" <<'PY'
import json, sys
from pathlib import Path
from moegen.spec import load_model
from moegen.problem import ProblemKey
tables, model, dest = sys.argv[1:]
key = ProblemKey.of(load_model(model)).slug
src = next(Path(tables).glob(f"sm90/*/{key}.json"))
t = json.loads(src.read_text())
t["buckets"] = [b for b in t["buckets"] if b["tokens"] <= 8]
t["measurements"] = [m for m in t["measurements"] if m[0] <= 8]
dst = Path(dest) / "dispatch" / src.relative_to(tables)
dst.parent.mkdir(parents=True, exist_ok=True)
dst.write_text(json.dumps(t, indent=1) + "\n")
print(dest, "picks:", [(b["tokens"], b["gemm1"][12:], b["gemm2"][12:], b["us"]) for b in t["buckets"]])
PY
}
for part in "$@"; do
  read -r what model <<< "$part"
  if [ "$what" = T ]; then
    variant=$model
    timeout -k 5 200 python3 -m moegen tune --model $model --no-build --out $LIB --buckets 1,2,3,4,6,8 \
      --table-root $R/dispatch --warm-seconds 0.5 --min-seconds 0.03 --reps 3 --rotations 2 > $R/tune-$variant.txt 2>&1
    echo "tune $variant rc $?"; grep -E "T=|timings" $R/tune-$variant.txt | cut -c1-140
    cut_table $R/dispatch $model $LIB || exit 1
    mkdir -p $R/shipped/$variant && cp -r $LIB/$variant/sm90 $R/shipped/$variant/ && cut_table configs/dispatch $model $R/shipped || exit 1
    for o in a b; do
      if [ $o = a ]; then DD=$LIB; C=shipped=$R/shipped/$variant/sm90; else DD=$R/shipped; C=retuned=$LIB/$variant/sm90; fi
      timeout -k 5 170 python3 -m moegen bench --model $model --out $DD --compare $C \
        --tokens 1,2,3,4,6,8 --rounds 4 --json $R/bench-$variant-$o.json > $R/bench-$variant-$o.txt 2>&1
      echo "bench $o rc $?"; grep -E " T=" $R/bench-$variant-$o.txt | cut -c1-150
    done
  fi
done
tar czf $D/round_r.tgz -C $R .
