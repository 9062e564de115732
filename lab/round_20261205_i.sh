#!/usr/bin/env bash
# Round i (for the next H200 session; written 2026-12-05): the seven shipped buckets whose picks the
# compaction before 3ce5390 kept on their best timing (docs/benchmarks.md, footnote 12).  Per part it
# builds there (-j 16) the default kernels plus the searched pair's, writes the candidate table (those
# buckets set to the searched pairs, lab/searched_pair_tables.py) as that build's user table, checks it
# at the buckets' edges, and benches it against the shipped table on a copy of the same library without
# it, both orders (--rounds 6).  Merge by hand where both orders agree, then rerun the GPU tests of the
# variants whose tables changed.  Carry only the CUTLASS wheel (rm -rf .carry && mkdir -p .carry/whl &&
# cp .whl/nvidia_cutlass-*.whl .carry/whl/ && git rev-parse --short HEAD > .carry/commit.txt).
#   bash lab/round_20261205_i.sh [PART ...]     PART: "MODEL ACT TP EP RANK TOKENS" (default: all seven)
set -uo pipefail
source lab/device_env.sh || exit 1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,driver_version --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: the tables are the H200's"; exit 3; }
D=${OUT:-/tmp}; R=/tmp/round_i; mkdir -p $R
PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || PARTS=("qwen3-30b-a3b bf16 1 4 0 2" "deepseek-v3 bf16 1 1 0 4,1024" "deepseek-v3 fp8 1 1 0 6"
  "deepseek-v4-flash fp8 1 1 0 16384" "gpt-oss-20b bf16 2 1 0 32" "gpt-oss-20b fp8 2 1 0 6")
rc=0
for part in "${PARTS[@]}"; do
  read -r model act tp ep rank tokens <<< "$part"
  split="--activations $act"
  [ "$tp" = 1 ] || split="$split --tp $tp"
  [ "$ep" = 1 ] || split="$split --ep-size $ep --ep-rank $rank"
  variant=$(python3 -c "from moegen.cli import _spec; print(_spec('$model', $tp, $ep, $rank, '$act').variant)")
  kernels=$(python3 lab/searched_pair_tables.py $model $act $tp $ep $rank $tokens $R/cand 2> $R/pairs-$variant.txt) \
    || { cat $R/pairs-$variant.txt; rc=1; continue; }
  cat $R/pairs-$variant.txt
  python3 -m moegen build --model $model $split --arch sm90 --kernels "$kernels" --out $R/cand -j 16 \
    > $R/build-$variant.txt 2>&1 || { rc=1; tail -3 $R/build-$variant.txt; continue; }
  edges=$(python3 -c "print(','.join(str(v) for t in '$tokens'.split(',') for v in (int(t) - 1, int(t), int(t) + 1) if v > 0))")
  timeout -k 5 120 python3 -m moegen check --model $model $split --out $R/cand --tokens $edges > $R/check-$variant.txt 2>&1 || rc=1
  tail -1 $R/check-$variant.txt
  rm -rf $R/shipped/$variant && mkdir -p $R/shipped/$variant && cp -r $R/cand/$variant/sm90 $R/shipped/$variant/
  for o in a b; do  # the shipped side has no user table: the runtime takes configs/dispatch's
    if [ $o = a ]; then DD=$R/cand; C=shipped=$R/shipped/$variant/sm90; else DD=$R/shipped; C=searched=$R/cand/$variant/sm90; fi
    timeout -k 5 150 python3 -m moegen bench --model $model $split --out $DD --compare $C --tokens $tokens --rounds 6 \
      --json $R/bench-$variant-$o.json > $R/bench-$variant-$o.txt 2>&1 || rc=1
    echo "bench $variant $o"; grep -E " T=" $R/bench-$variant-$o.txt | cut -c1-150
  done
  tar czf $D/round_i.tgz -C $R --exclude='*.so' --exclude='.objects' . 2>/dev/null
done
exit $rc
