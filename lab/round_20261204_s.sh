#!/usr/bin/env bash
# Round s (2026-12-04, c068854): the token counts no shipped table had tuned.
# Every table holds buckets 1, 4, 16, 64, 256, 1024, 4096, 16384 (plus 2, 3, 6, 8 where retuned), and T
# runs the pair of the smallest bucket at or above it, so T = 32, 128, 512, 2048 and 8192 run the next
# bucket's pair, never timed there (at T = 2-8 such borrowed pairs cost gpt-oss-20b 5-15 %, round r).
# Library: each model's shortlist plus its default kernels (generated/_exp/mid/<variant>/sm90, built with
# `moegen build --kernels <names> --out generated/_exp/mid`). Tune those buckets with the shipped tuner
# settings into a copy of configs/dispatch (the other buckets keep their pairs), then the new table
# against the shipped one on that library, both orders.
#   T MODEL [fp8|bf16] [SPLIT...]   tune --buckets $TOKENS (default 32,128,512,2048,8192), bench new /
#       shipped at those T (`--rounds 4`); SPLIT: `--tp 2` or `--ep-size 8 --ep-rank 0` (round t).
#       SKIP_TUNE=1 benches the table an earlier call tuned (R persists while the device stays warm),
#       SKIP_BENCH=1 only tunes; BENCH_TOKENS (default TOKENS) the bench's T.
#   G   the GPU tests on the new tables' libraries (`lab/build_test_libs.py`, BF16 with
#       MOEGEN_TEST_KERNELS=default, carried in generated/_gputest): BF16 reference and batch invariance
#       on the five models, every W4A8 variant
#   Q   Qwen3-30B-A3B W4A8 at T = 500 and 512, the shipped spill-free pair against the previous table
#       (generated/_exp/q8: the W4A8 test library, the previous table as its user table), both orders
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
R=/tmp/round_s; mkdir -p $R
LIB=generated/_exp/mid
TOKENS=${TOKENS:-32,128,512,2048,8192}
# a table tuned in an earlier call whose machine was since given back: carry it in .carry/round_s/dispatch
[ -d $R/dispatch ] || cp -r $( [ -d .carry/round_s/dispatch ] && echo .carry/round_s/dispatch || echo configs/dispatch) $R/dispatch
table_of() {  # table_of TABLES MODEL ACT DEST_ROOT: the variant's table from TABLES as DEST_ROOT's user table
  python3 - "$@" <<'PY'
import json, shutil, sys
from pathlib import Path
from moegen.spec import load_model
from moegen.problem import ProblemKey
from moegen.cli import _spec
tables, model, act, dest, tp, ep, rank = sys.argv[1:]
spec = _spec(model, int(tp), int(ep), int(rank), act)
key = ProblemKey.of(spec).slug
src = next(Path(tables).glob(f"sm90/*/{key}.json"))
dst = Path(dest) / "dispatch" / src.relative_to(tables)
dst.parent.mkdir(parents=True, exist_ok=True)
shutil.copyfile(src, dst)
t = json.loads(src.read_text())
print(dest, "picks:", [(b["tokens"], b["gemm1"][12:], b["gemm2"][12:], b["us"]) for b in t["buckets"]])
PY
}
for part in "$@"; do
  read -r what model act split <<< "$part"
  act=${act:-bf16}; split=${split:-}
  tp=1; ep=1; rank=0
  if [[ $split =~ --tp\ ([0-9]+) ]]; then tp=${BASH_REMATCH[1]}; fi
  if [[ $split =~ --ep-size\ ([0-9]+) ]]; then ep=${BASH_REMATCH[1]}; fi
  if [[ $split =~ --ep-rank\ ([0-9]+) ]]; then rank=${BASH_REMATCH[1]}; fi
  variant=$(python3 -c "from moegen.cli import _spec; print(_spec('$model', $tp, $ep, $rank, '$act').variant)")
  if [ "$what" = T ] && [ -z "${SKIP_TUNE:-}" ]; then
    timeout -k 5 ${TUNE_LIMIT:-420} python3 -m moegen tune --model $model --activations $act $split --no-build --out $LIB --buckets $TOKENS \
      --table-root $R/dispatch --warm-seconds 0.5 --min-seconds 0.03 --reps 3 --rotations ${ROTATIONS:-2} > $R/tune-$variant.txt 2>&1
    echo "tune $variant rc $?"; grep -E "T=|timings" $R/tune-$variant.txt | cut -c1-140
  fi
  if [ "$what" = T ] && [ -z "${SKIP_BENCH:-}" ]; then
    table_of $R/dispatch $model $act $LIB $tp $ep $rank || exit 1
    rm -rf $R/shipped/$variant && mkdir -p $R/shipped/$variant && cp -r $LIB/$variant/sm90 $R/shipped/$variant/
    for o in a b; do  # the shipped side has no user table: the runtime takes configs/dispatch's
      if [ $o = a ]; then DD=$LIB; C=shipped=$R/shipped/$variant/sm90; else DD=$R/shipped; C=retuned=$LIB/$variant/sm90; fi
      timeout -k 5 ${BENCH_LIMIT:-250} python3 -m moegen bench --model $model --activations $act $split --out $DD --compare $C \
        --tokens ${BENCH_TOKENS:-$TOKENS} --rounds 4 --json $R/bench-$variant-$o.json > $R/bench-$variant-$o.txt 2>&1
      echo "bench $o rc $?"; grep -E " T=" $R/bench-$variant-$o.txt | cut -c1-150
    done
  fi
  if [ "$what" = G ]; then
    (MOEGEN_TEST_KERNELS=default timeout -k 5 110 python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider \
      -k "(matches_reference or batch_invariance) and not tp2 and not ep1of and not grouped" 2>&1) > $D/GB.txt
    (timeout -k 5 100 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider 2>&1) > $D/G8.txt
    tail -1 $D/GB.txt $D/G8.txt
  fi
  if [ "$what" = Q ]; then
    for o in a b; do
      if [ $o = a ]; then DD=generated/_gputest; C=previous=generated/_exp/q8/qwen3-30b-a3b-w4a8/sm90
      else DD=generated/_exp/q8; C=new=generated/_gputest/qwen3-30b-a3b-w4a8/sm90; fi
      timeout -k 5 50 python3 -m moegen bench --model qwen3-30b-a3b --activations fp8 --out $DD --compare $C \
        --tokens 500,512 --rounds 4 --json $R/q8-$o.json 2>&1 | grep " T=" | cut -c1-150
    done
  fi
done
tar czf $D/round_s.tgz -C $R .
