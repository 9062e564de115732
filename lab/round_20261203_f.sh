#!/usr/bin/env bash
# Round 2026-12-03 f (thirteenth session): gpt-oss on 128-deep K tiles.  K = 2880 is not a multiple of
# 128; stepped tiles (one consumer warpgroup, two 64-deep steps per K tile) now end the K loop on a
# half tile, so gpt-oss gets the 4 KB copies DeepSeek's decode streams with.  Built here:
#   moegen build --model gpt-oss-120b --arch sm90 --kernels <the 16 one-warpgroup k128 tiles m64 n8/n16
#       s4-s8 and n64 s4/s6 of both GEMMs, and the k64 picks of the shipped table up to T = 1024>
#       --out generated/_exp/k128tail --objects generated/_exp/k128tail/.objects     (and gpt-oss-20b alike)
#   then lab/stage_carry.sh generated/_exp/k128tail (the libraries land in .carry's tarball under that path).
# Parts:
#   T <MODEL>: `moegen tune` of T = 1-1024 on that library, with the shipped tuner settings, into a copy
#      of configs/dispatch (the other buckets keep their picks); the new table and the shipped one, cut
#      to those buckets, as the user tables of two roots over the same library (LIB/dispatch and
#      $R/shipped); then `moegen bench` of the two, both orders.
#   C <MODEL>: `moegen check` of the library against float64 (T = 0, 1, 7, 300), every kernel against
#      every other bit for bit (lab/bitwise_kernels.py), batch invariance with the new table.
# Results in $OUT/results-f.tgz.      bash lab/round_20261203_f.sh OUT "T gpt-oss-120b" "C gpt-oss-120b"
set -uo pipefail
OUT=$1
R=/tmp/round_20261203_f; mkdir -p $R
pack() { tar czf "$OUT/results-f.tgz" -C $R . ; }
LIB=generated/_exp/k128tail
[ -d $R/dispatch ] || cp -r configs/dispatch $R/dispatch
cut_table() {  # cut_table TABLES MODEL DEST_ROOT: MODEL's table from TABLES, buckets <= 1024, as DEST_ROOT's user table
  python3 - "$@" <<'PY'
import json, sys
from pathlib import Path
from moegen.spec import load_model
from moegen.problem import ProblemKey
tables, model, dest = sys.argv[1:]
key = ProblemKey.of(load_model(model)).slug
src = next(Path(tables).glob(f"sm90/*/{key}.json"))
t = json.loads(src.read_text())
t["buckets"] = [b for b in t["buckets"] if b["tokens"] <= 1024]
t["measurements"] = [m for m in t["measurements"] if m[0] <= 1024]
dst = Path(dest) / "dispatch" / src.relative_to(tables)
dst.parent.mkdir(parents=True, exist_ok=True)
dst.write_text(json.dumps(t, indent=1) + "\n")
print(dest, "picks:", [(b["tokens"], b["gemm1"][12:], b["gemm2"][12:], b["us"]) for b in t["buckets"]])
PY
}
for part in "${@:2}"; do
  read -r what model <<< "$part"
  if [ "$what" = T ]; then
    timeout -k 5 200 python3 -m moegen tune --model $model --no-build --out $LIB --buckets 1,4,16,64,256,1024 \
      --table-root $R/dispatch --warm-seconds 0.5 --min-seconds 0.03 --reps 3 --rotations 2 > $R/tune-$model.txt 2>&1
    echo "tune $model rc $?"; grep -E "T=|timings" $R/tune-$model.txt | cut -c1-140; pack
    cut_table $R/dispatch $model $LIB || exit 1
    mkdir -p $R/shipped/$model && cp -r $LIB/$model/sm90 $R/shipped/$model/ && cut_table configs/dispatch $model $R/shipped || exit 1
    for o in a b; do
      if [ $o = a ]; then D=$LIB; C=shipped=$R/shipped/$model/sm90; else D=$R/shipped; C=k128=$LIB/$model/sm90; fi
      timeout -k 5 170 python3 -m moegen bench --model $model --out $D --compare $C \
        --tokens 1,4,16,64,256,1024 --rounds 4 --json $R/bench-$model-$o.json > $R/bench-$model-$o.txt 2>&1
      echo "bench $o rc $?"; grep -v Warning $R/bench-$model-$o.txt | tail -16 | cut -d'|' -f2-8,13
      pack
    done
  fi
  if [ "$what" = C ]; then
    timeout -k 5 200 python3 -m moegen check --model $model --out $LIB --tokens 0,1,7,300 > $R/check-$model.txt 2>&1
    echo "check $model rc $?"; grep -iv "warn" $R/check-$model.txt | tail -3
    timeout -k 5 150 python3 lab/bitwise_kernels.py $LIB/$model/sm90 $model --tokens 1,4,37,300,1030 > $R/bitwise-$model.txt 2>&1
    echo "bitwise $model rc $?: $(grep -c ': equal' $R/bitwise-$model.txt) equal"; grep -v ': equal' $R/bitwise-$model.txt | tail -3
    timeout -k 5 100 python3 lab/batch_invariance_ab.py $LIB $model > $R/invariance-$model.txt 2>&1
    echo "invariance $model rc $?"; tail -2 $R/invariance-$model.txt | cut -c1-300
    pack
  fi
done
