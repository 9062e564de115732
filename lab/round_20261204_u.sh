#!/usr/bin/env bash
# Round u (2026-12-04, a third session): the whole W4A8 GPU test file, then round t's parts: whole tables
# for the W4A8 splits that still ran on the heuristic (Qwen3-30B-A3B --ep-size 4, --ep-size 8 of both
# DeepSeek models) and gpt-oss-20b --tp 2 BF16 between its x4 buckets.  Libraries: generated/_gputest
# (lab/build_test_libs.py) and generated/_exp/mid (lab/mid_kernels.py), carried with lab/stage_carry.sh.
#   G8=1 [G8_K=expr] bash lab/round_20261204_u.sh [round t parts...]
#   MERGE="MODEL [SPLIT] : TEST_VARIANT" after the parts (BF16): lab/bench_verdict.py --merge of the tuned
#       table into its configs/dispatch table here (the new buckets both bench orders confirm), then that
#       variant's tests/test_gpu_layer.py on it (MOEGEN_TEST_KERNELS=default; builds link from the carried
#       mid objects, generated/_exp/mid/.objects).
# The calls this session ran (ALL=1,2,3,4,6,8,16,32,64,128,256,512,1024,2048,4096,8192,16384;
# X4=1,4,16,64,256,1024,4096,16384):
#   G8=1 SKIP_BENCH=1 TOKENS=$ALL ... "T qwen3-30b-a3b fp8 --ep-size 4 --ep-rank 0", then
#       SKIP_TUNE=1 BENCH_TOKENS=$X4 with the same part
#   TOKENS=$ALL BENCH_TOKENS=$X4 ... "T deepseek-v4-flash fp8 --ep-size 8 --ep-rank 0"
#   P="T deepseek-v3 fp8 --ep-size 8 --ep-rank 0": ROTATIONS=8 SKIP_BENCH=1 TOKENS=1,...,128 "$P";
#       SKIP_BENCH=1 TOKENS=256,...,16384 "$P"; SKIP_TUNE=1 BENCH_TOKENS=$X4 "$P"
#   G8=1 G8_K="ep1of4 or ep1of8" MERGE="gpt-oss-20b --tp 2 : gpt-oss-20b-tp2" ... "T gpt-oss-20b bf16 --tp 2"
# then, here: python3 lab/bench_verdict.py A B --override TUNED configs/dispatch/... for the W4A8 tables.
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
rc=0
if [ -n "${G8:-}" ]; then
  (timeout -k 5 ${G8_LIMIT:-300} python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider -rs \
    ${G8_K:+-k "$G8_K"} 2>&1) > $D/G8.txt || rc=1
  grep -E "seed|passed|failed|error" $D/G8.txt | tail -5
fi
if [ $# -gt 0 ]; then
  TOKENS=${TOKENS:-2,3,6,8,32,128,512,2048,8192} bash lab/round_20261204_s.sh "$@" || rc=1
fi
if [ -n "${MERGE:-}" ]; then
  IFS=: read -r problem variant <<< "$MERGE"
  read -r model split <<< "$problem"; read -r variant <<< "$variant"
  tp=1; ep=1; rank=0
  if [[ $split =~ --tp\ ([0-9]+) ]]; then tp=${BASH_REMATCH[1]}; fi
  if [[ $split =~ --ep-size\ ([0-9]+) ]]; then ep=${BASH_REMATCH[1]}; fi
  if [[ $split =~ --ep-rank\ ([0-9]+) ]]; then rank=${BASH_REMATCH[1]}; fi
  read -r mv key < <(python3 -c "from moegen.cli import _spec; from moegen.problem import ProblemKey
s = _spec('$model', $tp, $ep, $rank, 'bf16'); print(s.variant, ProblemKey.of(s).slug)") || exit 1
  table=configs/dispatch/sm90/nvidia-h200-132sm/$key.json
  python3 lab/bench_verdict.py /tmp/round_s/bench-$mv-{a,b}.json --merge /tmp/round_s/dispatch/${table#configs/dispatch/} \
    $table || exit 1
  cp $table $D/
  ln -sfn _exp/mid/.objects generated/.objects
  (MOEGEN_TEST_KERNELS=default timeout -k 5 ${MERGE_TEST_LIMIT:-120} python3 -m pytest -m gpu tests/test_gpu_layer.py -q \
    -p no:cacheprovider -k "$variant" 2>&1) > $D/GM.txt || rc=1
  grep -E "seed|passed|failed|error" $D/GM.txt | tail -5
fi
exit $rc
