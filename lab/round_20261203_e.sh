#!/usr/bin/env bash
# Round 2026-12-03 e (twelfth session): the two-step consumer retuned over the decode and mid-T
# buckets.  It ran at db064f3 with lab/experiments/consumer_k_steps.patch, which then landed as the
# next commit (moegen/, templates/ and tests/ of `git show` that commit are the patch; the file is gone):
# to rerun it, put that diff back at that path on db064f3.  Round d's part S measures the patch on
# the shipped picks; this round tunes T = 1-256 over the candidates those buckets timed, patched.  Built here, in a
# worktree with the patch applied (the 29 patched one-consumer k128 kernels come from the object store
# of generated/_exp/step64all; the rest, k64 and m128 tiles, are rebuilt because the template changed):
#   moegen build --model MODEL --arch sm90 --kernels <the kernels the shipped table timed at T <= 256,
#       and every patched kernel of MODEL> --out generated/_exp/tune64b --objects generated/_exp/step64all/.objects
#   then copy each <model>/sm90/{manifest.json,libmoegen-*.so} to .carry/tune64b (after lab/stage_carry.sh),
#   and the HEAD builds it is compared with: .carry/abbase (round d) and generated/cand's DeepSeek-V3
#   and Qwen3-30B-A3B (the shipped kernels) as .carry/cand.
# generated/_exp/tune64 was the first patch (m64n32k128 stepped too, which serialized its wgmmas and
# lost at T = 1); tune64b has the rule that leaves it in one step.
# Parts (the patched Python and templates run from a patched copy of the tree):
#   T <MODEL>: `moegen tune` of T = 1-256 on .carry/tune64's library, with the shipped tuner settings,
#      into a copy of configs/dispatch (the other buckets keep their picks); then the new table cut to
#      those buckets benched against the shipped kernels at HEAD (HEAD_BUILD, below), both orders.
#   X <MODEL>: every output bit of the kernels the two builds share, against HEAD's (lab/bitwise_ab.py),
#      and `moegen check` of the patched library against the float64 reference.
# Results in $OUT/results-e.tgz (dispatch/ holds the merged tables).   bash lab/round_20261203_e.sh OUT "T deepseek-v4-flash"
set -uo pipefail
OUT=$1
R=/tmp/round_20261203_e; mkdir -p $R
pack() { tar czf "$OUT/results-e.tgz" -C $R . ; }
P=/tmp/moegen-step64
if [ ! -d $P ]; then
  mkdir -p $P && cp -r moegen templates configs tests lab pyproject.toml $P/ && \
    (cd $P && patch -p1 -s < lab/experiments/consumer_k_steps.patch) || exit 1
fi
[ -d $R/dispatch ] || cp -r configs/dispatch $R/dispatch
declare -A HEAD_BUILD=([deepseek-v4-flash]=.carry/abbase [deepseek-v3]=.carry/cand [qwen3-30b-a3b]=.carry/cand)
for part in "${@:2}"; do
  read -r what model <<< "$part"
  if [ "$what" = T ]; then
    NEW=.carry/tune64b
    PYTHONPATH=$P:/tmp/moegen-site timeout -k 5 330 python3 -m moegen tune --model $model --no-build --out $NEW \
      --buckets 1,4,16,64,256 --table-root $R/dispatch --warm-seconds 0.5 --min-seconds 0.03 --reps 3 --rotations 2 \
      > $R/tune-$model.txt 2>&1
    echo "tune $model rc $?"; grep -E "T=|timings" $R/tune-$model.txt | cut -c1-120; pack
    # the new table, cut to the tuned buckets (the library has only their candidates), as NEW's user table
    python3 - $model $R/dispatch $NEW <<'EOF' || exit 1
import json, sys
from pathlib import Path
from moegen.spec import load_model
from moegen.problem import ProblemKey
model, tables, new = sys.argv[1:]
key = ProblemKey.of(load_model(model)).slug
src = next(Path(tables).glob(f"sm90/*/{key}.json"))
t = json.loads(src.read_text())
t["buckets"] = [b for b in t["buckets"] if b["tokens"] <= 256]
t["measurements"] = [m for m in t["measurements"] if m[0] <= 256]
dst = Path(new) / "dispatch" / src.relative_to(tables)
dst.parent.mkdir(parents=True, exist_ok=True)
dst.write_text(json.dumps(t, indent=1) + "\n")
print("picks:", [(b["tokens"], b["gemm1"][12:], b["gemm2"][12:], b["us"]) for b in t["buckets"]])
EOF
    H=${HEAD_BUILD[$model]}/$model/sm90
    for o in a b; do
      if [ $o = a ]; then D=$NEW; C=head=$H; else D=${HEAD_BUILD[$model]}; C=step64=$NEW/$model/sm90; fi
      PYTHONPATH=$P:/tmp/moegen-site timeout -k 5 150 python3 -m moegen bench --model $model --out $D --compare $C \
        --tokens 1,4,16,64,256 --rounds 4 --json $R/bench-$model-$o.json > $R/bench-$model-$o.txt 2>&1
      echo "bench $o rc $?"; grep -v Warning $R/bench-$model-$o.txt | tail -14 | cut -d'|' -f2-8,13
      pack
    done
  fi
  if [ "$what" = X ]; then
    timeout -k 5 150 python3 lab/bitwise_ab.py ${HEAD_BUILD[$model]}/$model/sm90 .carry/tune64b/$model/sm90 $model \
      --tokens 1,4,37,300,2048 > $R/bitwise-$model.txt 2>&1
    echo "bitwise $model rc $?: $(grep -c ': equal' $R/bitwise-$model.txt) equal"; grep -v ': equal' $R/bitwise-$model.txt | tail -3
    PYTHONPATH=$P:/tmp/moegen-site timeout -k 5 200 python3 -m moegen check --model $model --out .carry/tune64b \
      --tokens 0,1,7,300 > $R/check-$model.txt 2>&1
    echo "check $model rc $?"; grep -iv "warn" $R/check-$model.txt | tail -3
    pack
  fi
done
