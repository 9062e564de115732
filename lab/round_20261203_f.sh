#!/usr/bin/env bash
# Round 2026-12-03 f (thirteenth session): gpt-oss on 128-deep K tiles.  K = 2880 is not a multiple of
# 128; stepped tiles (one consumer warpgroup, two 64-deep steps per K tile) now end the K loop on a
# half tile, so gpt-oss gets the 4 KB copies DeepSeek's decode streams with.  Built here:
#   moegen build --model gpt-oss-120b --arch sm90 --kernels <the 16 one-warpgroup k128 tiles m64 n8/n16
#       s4-s8 and n64 s4/s6 of both GEMMs, and the k64 picks of the shipped table up to T = 1024>
#       --out generated/_exp/k128tail --objects generated/_exp/k128tail/.objects     (and gpt-oss-20b alike)
#   then lab/stage_carry.sh generated/_exp/k128tail (the libraries land in .carry's tarball under that path).
# Parts:
#   T <MODEL> [TP]: `moegen tune` of T = 1-1024 on that library, with the shipped tuner settings, into a copy
#      of configs/dispatch (the other buckets keep their picks); the new table and the shipped one, cut
#      to those buckets, as the user tables of two roots over the same library (LIB/dispatch and
#      $R/shipped); then `moegen bench` of the two, both orders.
#   C <MODEL> [TP]: `moegen check` of the library against float64 (T = 0, 1, 7, 300), every kernel against
#      every other bit for bit (lab/bitwise_kernels.py), batch invariance with the new table.
#   B MODEL: gpt-oss-20b's new table against the shipped one on one library with both tables' picks (built
#      here as generated/_exp/bench20b; round T's library lacked the shipped picks of gpt-oss-20b).
#   Q: Qwen3-30B-A3B --tp 4's default build (a K loop of one whole tile and a half, all in the prologue).
#   W: gpt-oss-120b's W4A16 library with this round's table against the shipped W4A8 table's kernels.
#   G <EXPR>: the GPU tests (tests/test_gpu_layer.py -k EXPR) with this round's tables.
# Results in $OUT/results-f.tgz.      bash lab/round_20261203_f.sh OUT "T gpt-oss-120b" "C gpt-oss-120b"
set -uo pipefail
OUT=$1
R=/tmp/round_20261203_f; mkdir -p $R
pack() { tar czf "$OUT/results-f.tgz" -C $R . ; }
LIB=generated/_exp/k128tail
[ -d $R/dispatch ] || cp -r configs/dispatch $R/dispatch
cut_table() {  # cut_table TABLES MODEL TP DEST_ROOT: the variant's table from TABLES, buckets <= 1024, as DEST_ROOT's user table
  python3 - "$@" <<'PY'
import json, sys
from pathlib import Path
from moegen.spec import load_model
from moegen.problem import ProblemKey
tables, model, tp, dest = sys.argv[1:]
key = ProblemKey.of(load_model(model).with_parallel(tp_size=int(tp))).slug
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
  read -r what model tp <<< "$part"
  tp=${tp:-1}; TP="--tp $tp"
  [ "$what" = T ] || [ "$what" = C ] && variant=$(python3 -c "from moegen.spec import load_model; print(load_model('$model').with_parallel(tp_size=$tp).variant)")
  if [ "$what" = T ]; then
    timeout -k 5 200 python3 -m moegen tune --model $model $TP --no-build --out $LIB --buckets 1,4,16,64,256,1024 \
      --table-root $R/dispatch --warm-seconds 0.5 --min-seconds 0.03 --reps 3 --rotations 2 > $R/tune-$variant.txt 2>&1
    echo "tune $variant rc $?"; grep -E "T=|timings" $R/tune-$variant.txt | cut -c1-140; pack
    cut_table $R/dispatch $model $tp $LIB || exit 1
    mkdir -p $R/shipped/$variant && cp -r $LIB/$variant/sm90 $R/shipped/$variant/ && cut_table configs/dispatch $model $tp $R/shipped || exit 1
    for o in a b; do
      if [ $o = a ]; then D=$LIB; C=shipped=$R/shipped/$variant/sm90; else D=$R/shipped; C=k128=$LIB/$variant/sm90; fi
      timeout -k 5 170 python3 -m moegen bench --model $model $TP --out $D --compare $C \
        --tokens 1,4,16,64,256,1024 --rounds 4 --json $R/bench-$variant-$o.json > $R/bench-$variant-$o.txt 2>&1
      echo "bench $o rc $?"; grep -v Warning $R/bench-$variant-$o.txt | tail -14 | cut -d'|' -f2-8,13
      # a table naming kernels the library lacks falls back to the heuristic: that comparison is void
      grep -q "which the library does not have" $R/bench-$variant-$o.txt && echo "INVALID: a table's picks are missing"
      pack
    done
  fi
  if [ "$what" = C ]; then
    timeout -k 5 200 python3 -m moegen check --model $model $TP --out $LIB --tokens 0,1,7,300 > $R/check-$variant.txt 2>&1
    echo "check $variant rc $?"; grep -iv "warn" $R/check-$variant.txt | tail -3
    timeout -k 5 150 python3 lab/bitwise_kernels.py $LIB/$variant/sm90 $model --tp $tp --tokens 1,4,37,300,1030 > $R/bitwise-$variant.txt 2>&1
    echo "bitwise $variant rc $?: $(grep -c ': equal' $R/bitwise-$variant.txt) equal"; grep -v ': equal' $R/bitwise-$variant.txt | tail -3
    timeout -k 5 100 python3 lab/batch_invariance_ab.py $LIB $model --tp $tp > $R/invariance-$variant.txt 2>&1
    echo "invariance $variant rc $?"; tail -2 $R/invariance-$variant.txt | cut -c1-300
    pack
  fi
  if [ "$what" = B ]; then  # B MODEL: the new table against the shipped one on one library holding both's picks
    # (generated/_exp/bench20b and bench20b_old, each with its table cut to T <= 1024 as its user table)
    NEW=generated/_exp/bench20b; OLD=generated/_exp/bench20b_old
    for o in a b; do
      if [ $o = a ]; then D=$NEW; C=shipped=$OLD/$model/sm90; else D=$OLD; C=k128=$NEW/$model/sm90; fi
      timeout -k 5 170 python3 -m moegen bench --model $model --out $D --compare $C \
        --tokens 1,4,16,64,256,1024 --rounds 4 --json $R/benchB-$model-$o.json > $R/benchB-$model-$o.txt 2>&1
      echo "bench $o rc $?"; grep -v Warning $R/benchB-$model-$o.txt | tail -14 | cut -d'|' -f2-8,13
      pack
    done
  fi
  if [ "$what" = Q ]; then  # Qwen3-30B-A3B --tp 4's default build: GEMM2's K = 192 is one whole K tile and a half,
    # both issued in the ring's prologue (generated/_exp/qwen3tp4, `moegen build --model qwen3-30b-a3b --tp 4`)
    timeout -k 5 150 python3 -m moegen check --model qwen3-30b-a3b --tp 4 --out generated/_exp/qwen3tp4 \
      --tokens 0,1,7,300,1030 > $R/check-qwen3tp4.txt 2>&1
    echo "check qwen3 tp4 rc $?"; grep -iv "warn" $R/check-qwen3tp4.txt | tail -2
    timeout -k 5 100 python3 lab/bitwise_kernels.py generated/_exp/qwen3tp4/qwen3-30b-a3b-tp4/sm90 qwen3-30b-a3b --tp 4 \
      --tokens 1,4,37,300,1030 > $R/bitwise-qwen3tp4.txt 2>&1
    echo "bitwise qwen3 tp4 rc $?: $(grep -c ': equal' $R/bitwise-qwen3tp4.txt) equal"; grep -v ': equal' $R/bitwise-qwen3tp4.txt | tail -2
    pack
  fi
  if [ "$what" = W ]; then  # this round's gpt-oss-120b W4A16 table against the shipped W4A8 one (the tests' W4A8 build)
    timeout -k 5 170 python3 -m moegen bench --model gpt-oss-120b --out $LIB \
      --compare w4a8=generated/_gputest/gpt-oss-120b-w4a8/sm90 --tokens 1,4,16,64,256,1024 --rounds 4 \
      --json $R/bench-w4a8.json > $R/bench-w4a8.txt 2>&1
    echo "bench w4a8 rc $?"; grep -v Warning $R/bench-w4a8.txt | tail -14 | cut -d'|' -f2-8,13
    pack
  fi
  if [ "$what" = G ]; then
    # The GPU tests of the gpt-oss variants (MODEL: a pytest -k expression) with this round's tables, on the
    # tests' libraries carried from here (generated/_gputest; objects for relinking in generated/_carrystore).
    cp -n generated/_carrystore/.objects/* generated/.objects/ 2>/dev/null || { mkdir -p generated/.objects && cp generated/_carrystore/.objects/* generated/.objects/; }
    cp $R/dispatch/sm90/nvidia-h200-132sm/*.json configs/dispatch/sm90/nvidia-h200-132sm/
    timeout -k 5 400 python3 -m pytest -m gpu tests/test_gpu_layer.py -k "${part#G }" -q -p no:cacheprovider > $R/gputest.txt 2>&1
    echo "gpu tests rc $?"; grep -E "seed|passed|failed|error" $R/gputest.txt | tail -6
    # every kernel on the persistent grid too: --tp 2's GEMM2 (K = 1440, padded to 1472) loops over tiles
    # whose 12 K tiles end on a half tile (k128 s4 and s6)
    MOEGEN_GRID=persistent timeout -k 5 200 python3 -m pytest -m gpu tests/test_gpu_layer.py -k "every_kernel and tp2" \
      -q -p no:cacheprovider > $R/gputest-persistent.txt 2>&1
    echo "gpu tests, persistent grid, rc $?"; grep -E "seed|passed|failed|error" $R/gputest-persistent.txt | tail -4
    pack
  fi
done
