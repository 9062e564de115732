#!/usr/bin/env bash
# Round o (2026-12-04): W4A8's small-T buckets retuned on the current kernels.  The shipped W4A8 tables
# of Qwen3-30B-A3B and gpt-oss-120b were tuned at 073988d (buckets 1, 4, 16, ...), before GEMM2 and the
# quantizer followed GEMM1 per expert and before the routing moved beside its quantizer; in round n's
# timelines (gpt-oss-120b, T = 4) W4A8's GEMM2 launched 5 µs later than W4A16's.  A library of the
# twelve one-slice k128 tiles (m64 n8 / n16, s4 / s6 / s8, both GEMMs; generated/_exp/rt), tuned at
# T = 1, 2, 3, 4, 6, 8 with the shipped tuner settings, then the new table against the shipped one on
# the same library (each cut to T <= 8 as its root's user table), both orders.
#   T MODEL   tune, cut, bench (T = 1, 2, 3, 4, 6, 8, `--rounds 4`)
# ACT=bf16 ROUND_DIR=... ROUND_LIB=... run the same on BF16 tables (round r).
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
ACT=${ACT:-fp8}
R=${ROUND_DIR:-/tmp/round_o}; mkdir -p $R
LIB=${ROUND_LIB:-generated/_exp/rt}
[ -d $R/dispatch ] || cp -r configs/dispatch $R/dispatch
cut_table() {  # cut_table TABLES MODEL DEST_ROOT: the ACT variant's table from TABLES, buckets <= 8, as DEST_ROOT's user table
  python3 - "$@" $ACT <<'PY'
import json, sys
from pathlib import Path
from moegen.spec import load_model
from moegen.problem import ProblemKey
tables, model, dest, act = sys.argv[1:]
key = ProblemKey.of(load_model(model).with_activations(act)).slug
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
    [ "$ACT" = fp8 ] && variant=$model-w4a8 || variant=$model
    timeout -k 5 200 python3 -m moegen tune --model $model --activations $ACT --no-build --out $LIB --buckets 1,2,3,4,6,8 \
      --table-root $R/dispatch --warm-seconds 0.5 --min-seconds 0.03 --reps 3 --rotations 2 > $R/tune-$variant.txt 2>&1
    echo "tune $variant rc $?"; grep -E "T=|timings" $R/tune-$variant.txt | cut -c1-140
    cut_table $R/dispatch $model $LIB || exit 1
    mkdir -p $R/shipped/$variant && cp -r $LIB/$variant/sm90 $R/shipped/$variant/ && cut_table configs/dispatch $model $R/shipped || exit 1
    for o in a b; do
      if [ $o = a ]; then DD=$LIB; C=shipped=$R/shipped/$variant/sm90; else DD=$R/shipped; C=retuned=$LIB/$variant/sm90; fi
      timeout -k 5 170 python3 -m moegen bench --model $model --activations $ACT --out $DD --compare $C \
        --tokens 1,2,3,4,6,8 --rounds 4 --json $R/bench-$variant-$o.json > $R/bench-$variant-$o.txt 2>&1
      echo "bench $o rc $?"; grep -E " T=" $R/bench-$variant-$o.txt | cut -c1-150
    done
  fi
done
tar czf $D/$(basename $R).tgz -C $R .
