#!/usr/bin/env bash
# Round f (2026-12-05, a ninth session, H200): the last buckets no table had timed.  DeepSeek-V3 W4A8
# between its x4 buckets (T = 32, 128, 512, 2048, 8192; its table has 1-8 and the x4 buckets), and
# DeepSeek-V3 BF16 --ep-size 8 at the x4 buckets from 256 (tuned on the median of all replays, before the
# draws' mean; round e retuned the rest).  Libraries: generated/_exp/mid/<variant>/sm90
# (lab/mid_kernels.py), staged with
#   bash lab/stage_carry.sh generated/_exp/mid/deepseek-v3-w4a8 generated/_exp/mid/deepseek-v3-ep0of8 generated/.objects
# Each call packs /tmp/round_s into $OUT/round_s.tgz; a later call on a fresh machine unpacks
# .carry/round_s.tgz (copy the previous call's file there) first.
#   TUNE    tune both
#   BENCH   bench both, tuned against shipped, both orders
#   MERGE   lab/bench_verdict.py --merge of both tables into configs/dispatch, their default builds,
#           `moegen check` at the bucket edges, and the variants' GPU tests (MOEGEN_TEST_KERNELS=default)
set -uo pipefail
D=${OUT:-/tmp}
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: the tables are the H200's"; exit 3; }
[ -d /tmp/round_s ] || [ ! -f .carry/round_s.tgz ] || tar xzf .carry/round_s.tgz -C /tmp
W8="T deepseek-v3 fp8"
V3="T deepseek-v3 bf16 --ep-size 8 --ep-rank 0"
W8_T=32,128,512,2048,8192 V3_T=256,1024,4096,16384
rc=0
case $1 in
TUNE)
  SKIP_BENCH=1 TOKENS=$W8_T TUNE_LIMIT=280 bash lab/round_20261204_s.sh "$W8" || rc=1
  SKIP_BENCH=1 TOKENS=$V3_T TUNE_LIMIT=200 bash lab/round_20261204_s.sh "$V3" || rc=1 ;;
BENCH)
  SKIP_TUNE=1 TOKENS=$W8_T BENCH_LIMIT=150 bash lab/round_20261204_s.sh "$W8" || rc=1
  SKIP_TUNE=1 TOKENS=$V3_T BENCH_LIMIT=110 bash lab/round_20261204_s.sh "$V3" || rc=1 ;;
MERGE)
  source lab/device_env.sh || exit 1
  T8=configs/dispatch/sm90/nvidia-h200-132sm/e256-l256-k8-h7168-i2048-fp8.json
  python3 lab/bench_verdict.py /tmp/round_s/bench-deepseek-v3-w4a8-{a,b}.json \
    --merge /tmp/round_s/dispatch/${T8#configs/dispatch/} $T8 || exit 1
  cp $T8 $D/
  python3 -m moegen build --model deepseek-v3 --activations fp8 --arch sm90 --out generated/_chk \
    --objects generated/.objects -j 16 > $D/build-w4a8.txt 2>&1 || { rc=1; tail -3 $D/build-w4a8.txt; }
  timeout -k 5 150 python3 -m moegen check --model deepseek-v3 --activations fp8 --out generated/_chk \
    --tokens 0,1,2,5,17,31,32,33,127,128,129,511,512,513,2047,2048,2049,4096,8191,8192,8193 > $D/check-w4a8.txt 2>&1 || rc=1
  tail -3 $D/check-w4a8.txt
  (MOEGEN_TEST_KERNELS=default timeout -k 5 120 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q \
    -p no:cacheprovider -k "deepseek-v3-w4a8" 2>&1) > $D/tests-w4a8.txt || rc=1
  grep -E "seed|passed|failed|error" $D/tests-w4a8.txt | tail -3
  CHECK_TOKENS=0,1,255,256,257,1023,1024,1025,4095,4096,4097,16384 bash lab/round_20261205_a.sh MERGE \
    deepseek-v3 "--ep-size 8 --ep-rank 0" "deepseek-v3-ep1of8 and not w4a8" || rc=1 ;;
esac
tar czf $D/round_s.tgz -C /tmp round_s 2>/dev/null
exit $rc
