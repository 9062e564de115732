#!/usr/bin/env bash
# Round e (2026-12-05, an eighth session, H200): round a's leftovers.  The BF16 --ep-size 8 tables of
# DeepSeek-V3 (whole: its ×4 buckets were tuned on the median of all replays, before the draws' mean)
# and of DeepSeek-V4-Flash at T = 1, 4, 16, 64 (the T = 3-8 pair may win at 4 and 16).  Libraries:
# generated/_exp/mid/<variant>/sm90 (lab/mid_kernels.py), staged with
#   bash lab/stage_carry.sh generated/_exp/mid/deepseek-v3-ep0of8 generated/_exp/mid/deepseek-v4-flash-ep0of8 generated/.objects
# Each call packs /tmp/round_s into $OUT/round_s.tgz; a later call on a fresh machine unpacks
# .carry/round_s.tgz (copy the previous call's file there) first.
#   TUNE1    V4 ep8 T = 1,4,16,64 and V3 ep8 T = 1 ... 128 (--rotations 8)
#   TUNE2    V3 ep8 T = 512, 2048, 8192
#   BENCH    bench V3 at T = 1 ... 128 and V4 at 1, 4, 16, 64 (both orders), then MERGE
#   MERGE    lab/bench_verdict.py --merge of both tables, their default builds
#            and `moegen check` at the bucket edges; tests/test_gpu_layer.py of both ep1of8 variants
#   SUITE    pytest -m gpu tests/ (MOEGEN_TEST_KERNELS=default: the libraries link from the carried objects)
#   MEMCHECK the gpt-oss-120b batched tests with lab/mem_per_test.py: plain, under compute-sanitizer
#            memcheck, and under it with PyTorch's caching allocator off
# Ran (2026-12-05, H200): TUNE1; BENCH (the first TUNE2 call's machine was withdrawn, and the next
# starts failed, so BENCH ran without V3's large buckets); then TUNE2 with
#   SKIP_TUNE=1 TOKENS=512,2048,8192 BENCH_LIMIT=120 bash lab/round_20261204_s.sh "$V3"
# on the same warm machine, its --merge done here; lab/table_ab.md "DeepSeek-V3 `--ep-size 8` and
# DeepSeek-V4-Flash `--ep-size 8` at small T"; then SUITE and MEMCHECK (docs/benchmarks.md, "GPU tests and
# checks").
set -uo pipefail
D=${OUT:-/tmp}
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: the tables are the H200's"; exit 3; }
[ -d /tmp/round_s ] || [ ! -f .carry/round_s.tgz ] || tar xzf .carry/round_s.tgz -C /tmp
V4="T deepseek-v4-flash bf16 --ep-size 8 --ep-rank 0"
V3="T deepseek-v3 bf16 --ep-size 8 --ep-rank 0"
V3_SMALL=1,2,3,4,6,8,16,32,64,128 V3_LARGE=512,2048,8192
rc=0
case $1 in
TUNE1)
  ROTATIONS=8 SKIP_BENCH=1 TOKENS=1,4,16,64 TUNE_LIMIT=150 bash lab/round_20261204_s.sh "$V4" || rc=1
  ROTATIONS=8 SKIP_BENCH=1 TOKENS=$V3_SMALL TUNE_LIMIT=330 bash lab/round_20261204_s.sh "$V3" || rc=1 ;;
TUNE2)
  SKIP_BENCH=1 TOKENS=$V3_LARGE TUNE_LIMIT=120 bash lab/round_20261204_s.sh "$V3" || rc=1 ;;
BENCH|MERGE)
  if [ $1 = BENCH ]; then
    SKIP_TUNE=1 TOKENS=$V3_SMALL BENCH_LIMIT=120 bash lab/round_20261204_s.sh "$V3" || rc=1
    SKIP_TUNE=1 TOKENS=1,4,16,64 BENCH_LIMIT=60 bash lab/round_20261204_s.sh "$V4" || rc=1
  fi
  CHECK_TOKENS=0,1,2,3,4,5,7,8,9,16,17,33,64,65,128,129,257 \
    bash lab/round_20261205_a.sh MERGE deepseek-v3 "--ep-size 8 --ep-rank 0" "deepseek-v3-ep1of8 and not w4a8" || rc=1
  CHECK_TOKENS=0,1,2,3,4,5,8,9,16,17,33,64,65 bash lab/round_20261205_a.sh MERGE \
    deepseek-v4-flash "--ep-size 8 --ep-rank 0" deepseek-v4-flash-ep1of8 || rc=1 ;;
SUITE)
  source lab/device_env.sh || exit 1
  MOEGEN_TEST_KERNELS=default timeout 420 python3 -m pytest -m gpu tests/ -q -p no:cacheprovider -rs > $D/gpu_suite.txt 2>&1 || rc=1
  grep -E 'seed|passed|failed|SKIP|Error' $D/gpu_suite.txt | tail -12 ;;
MEMCHECK)
  source lab/device_env.sh || exit 1
  export MOEGEN_TEST_KERNELS=default PYTHONPATH=$PYTHONPATH:$PWD/lab
  K=(-m gpu tests/test_gpu_layer.py -k "batched and gpt-oss-120b" -p mem_per_test -s -q -p no:cacheprovider)
  timeout 80 python3 -m pytest "${K[@]}" 2>&1 | grep -E 'MEM|passed|failed|seed'
  timeout 150 compute-sanitizer --tool memcheck python3 -m pytest "${K[@]}" > $D/memcheck.txt 2>&1 || rc=1
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool memcheck python3 -m pytest "${K[@]}" \
    > $D/memcheck_nocache.txt 2>&1 || rc=1
  grep -hE 'MEM|passed|failed|ERROR SUMMARY|out of memory|seed' $D/memcheck.txt $D/memcheck_nocache.txt ;;
esac
tar czf $D/round_s.tgz -C /tmp round_s 2>/dev/null
exit $rc
