#!/usr/bin/env bash
# Round a (2026-12-05, a third session): the last tables with untuned token counts between their x4 buckets
# (round t's "still to run"): BF16 --ep-size 8 of DeepSeek-V4-Flash and DeepSeek-V3, and DeepSeek-V3 W4A8.
# Libraries: generated/_exp/mid/<variant>/sm90, built here with `moegen build ... --kernels "$(python
# lab/mid_kernels.py MODEL ACT TP EP RANK)" --out generated/_exp/mid --objects generated/.objects`, staged
# with `bash lab/stage_carry.sh generated/_exp/mid generated/.objects`.  Chain the calls while the device
# stays warm: the tuned tables live in /tmp/round_s there (round s).
#   TUNE PART        tune the small buckets (SMALL, default 2,3,6,8,32,128; ROTATIONS=8: with 32 local
#                    experts a few rows land per rank) and the large ones (LARGE, default 512,2048,8192)
#   BENCH PART       bench tuned against shipped at those T, both orders
#   MERGE MODEL SPLIT [TESTS]  lab/bench_verdict.py --merge of the tuned table into configs/dispatch's (the
#                    buckets both bench orders confirm), copied to $OUT; the default build of that table
#                    (links from the carried objects) and `moegen check` of it at the bucket edges
#                    (CHECK_TOKENS; the default covers SMALL and LARGE's defaults); TESTS: a -k expression of
#                    tests/test_gpu_layer.py to run on it (MOEGEN_TEST_KERNELS=default)
#   W4A8             DeepSeek-V3 W4A8 at 32,128,512,2048,8192: tune and bench (its table has 2-8)
# PART is round s's part string, e.g. "T deepseek-v4-flash bf16 --ep-size 8 --ep-rank 0".  Every call
# packs /tmp/round_s into $OUT/round_s.tgz (tuned tables, tune logs, bench JSONs); merge the W4A8 table
# here with lab/bench_verdict.py --merge.
# Ran (2026-12-05): TUNE, BENCH and MERGE of "T deepseek-v4-flash bf16 --ep-size 8 --ep-rank 0" (defaults;
# MERGE with tests deepseek-v4-flash-ep1of8), lab/table_ab.md.  Still to run (the device was withdrawn):
#   SMALL=1,4,16,64 LARGE= ... TUNE / BENCH / MERGE of the same part (the T = 3-8 pair at T = 4 and 16)
#   SMALL=1,2,3,4,6,8,16,32,64,128 LARGE=256,512,1024,2048,4096,8192,16384 ... TUNE / BENCH / MERGE of
#     "T deepseek-v3 bf16 --ep-size 8 --ep-rank 0" (MERGE deepseek-v3 "--ep-size 8 --ep-rank 0", with
#     CHECK_TOKENS=0,1,2,3,4,5,8,9,16,17,33,64,65,128,129,256,257,513,1024,1025,2049,4096,4097,8193,16384)
#   W4A8, then here: lab/bench_verdict.py A B --merge TUNED configs/dispatch/.../e256-l256-k8-h7168-i2048-fp8.json
set -uo pipefail
D=${OUT:-/tmp}
SMALL=${SMALL-2,3,6,8,32,128} LARGE=${LARGE-512,2048,8192}
TOKENS_BOTH=$(echo "$SMALL,$LARGE" | sed 's/^,//; s/,$//')
rc=0
what=$1; shift
case $what in
TUNE)
  [ -z "$SMALL" ] || ROTATIONS=8 SKIP_BENCH=1 TOKENS=$SMALL TUNE_LIMIT=280 bash lab/round_20261204_u.sh "$1" || rc=1
  [ -z "$LARGE" ] || SKIP_BENCH=1 TOKENS=$LARGE TUNE_LIMIT=200 bash lab/round_20261204_u.sh "$1" || rc=1 ;;
BENCH)
  SKIP_TUNE=1 TOKENS=$TOKENS_BOTH BENCH_LIMIT=250 bash lab/round_20261204_u.sh "$1" || rc=1 ;;
MERGE)
  source lab/device_env.sh || exit 1
  model=$1 split=$2 tests=${3:-}
  read -r variant key < <(python3 -c "import sys; from moegen.cli import _spec; from moegen.problem import ProblemKey
a = sys.argv[1:]; s = _spec('$model', int(a[a.index('--tp') + 1]) if '--tp' in a else 1,
  int(a[a.index('--ep-size') + 1]) if '--ep-size' in a else 1, int(a[a.index('--ep-rank') + 1]) if '--ep-rank' in a else 0, 'bf16')
print(s.variant, ProblemKey.of(s).slug)" $split) || exit 1
  table=configs/dispatch/sm90/nvidia-h200-132sm/$key.json
  python3 lab/bench_verdict.py /tmp/round_s/bench-$variant-{a,b}.json --merge /tmp/round_s/dispatch/${table#configs/dispatch/} \
    $table || exit 1
  cp $table $D/
  python3 -m moegen build --model $model $split --arch sm90 --out generated/_chk --objects generated/.objects -j 16 \
    > $D/build-$variant.txt 2>&1 || { rc=1; tail -3 $D/build-$variant.txt; }
  timeout -k 5 200 python3 -m moegen check --model $model $split --out generated/_chk \
    --tokens ${CHECK_TOKENS:-0,1,2,3,5,8,9,33,128,129,512,513,2048,2049,8192,8193} > $D/check-$variant.txt 2>&1 || rc=1
  tail -3 $D/check-$variant.txt
  if [ -n "$tests" ]; then
    (MOEGEN_TEST_KERNELS=default timeout -k 5 150 python3 -m pytest -m gpu tests/test_gpu_layer.py -q \
      -p no:cacheprovider -k "$tests" 2>&1) > $D/tests-$variant.txt || rc=1
    grep -E "seed|passed|failed|error" $D/tests-$variant.txt | tail -3
  fi ;;
W4A8)
  TOKENS=32,128,512,2048,8192 TUNE_LIMIT=300 BENCH_LIMIT=150 bash lab/round_20261204_u.sh "T deepseek-v3 fp8" || rc=1 ;;
esac
tar czf $D/round_s.tgz -C /tmp round_s 2>/dev/null
exit $rc
