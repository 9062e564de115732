#!/usr/bin/env bash
# Round j (2026-12-03):
#   S   W4A8 K tiles issued as two half-width wgmma batches (lab/experiments/w4a8_split_promotion.patch
#       on 455d803), each half's promotion overlapping the other half's wgmmas
#       (generated/_exp/split_promote/new, built with the patch applied) against
#       the shipped mainloop (generated/_exp/split_promote/base, 455d803): bit for bit on
#       DeepSeek-V4-Flash's default W4A8 build, then `moegen bench --activations fp8`, base listed
#       first.  S2: the same bench, the new library listed first.
#   P   W4A8 kernels without the per-expert progress code (the working tree; ptxas spilled 140 B in
#       455d803's m256n64k128s4, DeepSeek-V4-Flash's GEMM1 pick at T = 1024): the default W4A8 build
#       (generated/) against 455d803's (generated/_exp/split_promote/base), bit for bit, then
#       `moegen bench --activations fp8`, both orders.
#   N   DeepSeek-V4-Flash's default W4A8 build against its default BF16 build, one `moegen bench` run
#       (W4A8 listed first), T = 1-16384.
#   Z   the routing kernel zeroing GEMM1's per-expert progress counters only when GEMM2 follows them
#       (lab/experiments/zero_progress_in_window.patch, a layer-only change: generated/_exp/zero_progress)
#       against the default BF16 build, T = 1-8, both orders.
#   M   compute-sanitizer memcheck over tools/sanitize_run.py on DeepSeek-V4-Flash's default BF16 build
#       (T = 3 runs GEMM2 following GEMM1 per expert) and its default W4A8 build.
#   T   the new machine-code tests: every W4A8 variant's, and DeepSeek-V4-Flash's BF16 test library on
#       its default kernels (MOEGEN_TEST_KERNELS=default).
#   G8  the W4A8 GPU tests (tests/test_gpu_w4a8.py), every variant (their libraries build here if stale).
#   GB  the BF16 GPU tests' libraries built here with each variant's default kernels
#       (MOEGEN_TEST_KERNELS=default: a change to every kernel, without the whole shortlist), their
#       ptxas spills and C751x listed, then those tests.
#   A   ptxas spills and C751x of every kernel under generated/ (the build logs).
#   G   the BF16 GPU tests (tests/test_gpu_layer.py), every variant.
# Each part's output goes to $OUT/<part>.txt (DEVICE_OUT) and its tail to stdout.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
X=generated/_exp/split_promote
for part in "$@"; do
case $part in
S) for m in ${MODELS:-deepseek-v4-flash}; do
     echo "== $m"
     timeout -k 5 200 python3 lab/bitwise_ab.py $X/base/$m-w4a8/sm90 $X/new/$m-w4a8/sm90 $m --activations fp8 \
       --tokens 1,5,33,97,300,1030,4100 2>&1 | grep -v ": equal" | tail -4
     timeout -k 5 400 python3 -m moegen bench --model $m --activations fp8 --out $X/base \
       --compare split=$X/new/$m-w4a8/sm90 --tokens ${TOKENS:-64,256,1024,4096,16384} \
       --rounds 4 --json $D/split_$m.json 2>&1 | tail -12
   done > $D/S.txt 2>&1; tail -40 $D/S.txt ;;
S2) for m in ${MODELS:-deepseek-v4-flash}; do
     echo "== $m"
     timeout -k 5 400 python3 -m moegen bench --model $m --activations fp8 --out $X/new \
       --compare base=$X/base/$m-w4a8/sm90 --tokens ${TOKENS:-64,256,1024,4096,16384} \
       --rounds 4 --json $D/split_rev_$m.json 2>&1 | tail -12
   done > $D/S2.txt 2>&1; tail -30 $D/S2.txt ;;
P) for m in ${MODELS:-deepseek-v4-flash}; do
     echo "== $m"
     timeout -k 5 200 python3 lab/bitwise_ab.py $X/base/$m-w4a8/sm90 generated/$m-w4a8/sm90 $m --activations fp8 \
       --tokens 1,5,300,1030,4100 2>&1 | grep -v ": equal" | tail -4
     timeout -k 5 300 python3 -m moegen bench --model $m --activations fp8 --out $X/base \
       --compare fixed=generated/$m-w4a8/sm90 --tokens ${TOKENS:-256,1024,4096} --rounds 4 --json $D/fix_$m.json 2>&1 | tail -8
     timeout -k 5 300 python3 -m moegen bench --model $m --activations fp8 \
       --compare base=$X/base/$m-w4a8/sm90 --tokens ${TOKENS:-256,1024,4096} --rounds 4 --json $D/fix_rev_$m.json 2>&1 | tail -8
   done > $D/P.txt 2>&1; tail -30 $D/P.txt ;;
N) timeout -k 5 400 python3 -m moegen bench --model deepseek-v4-flash --activations fp8 \
     --compare w4a16=generated/deepseek-v4-flash/sm90 --rounds 4 --json $D/w4a8_vs_w4a16.json > $D/N.txt 2>&1
   tail -20 $D/N.txt ;;
Z) (timeout -k 5 200 python3 -m moegen bench --model deepseek-v4-flash --compare zero=generated/_exp/zero_progress/deepseek-v4-flash/sm90 \
      --tokens 1,2,4,8 --rounds 4 --json $D/zero.json | tail -10
    timeout -k 5 200 python3 -m moegen bench --model deepseek-v4-flash --out generated/_exp/zero_progress \
      --compare base=generated/deepseek-v4-flash/sm90 --tokens 1,2,4,8 --rounds 4 --json $D/zero_rev.json | tail -10) > $D/Z.txt 2>&1
   tail -24 $D/Z.txt ;;
M) for b in generated/deepseek-v4-flash/sm90 generated/deepseek-v4-flash-w4a8/sm90; do
     echo "== $b"
     timeout -k 5 ${M_LIMIT:-240} compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py $b 2>&1 | tail -3
     echo "rc $?"
   done > $D/M.txt 2>&1; cat $D/M.txt ;;
T) (timeout -k 5 120 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -k compiled_without_spills -q -p no:cacheprovider
    MOEGEN_TEST_KERNELS=default timeout -k 5 120 python3 -m pytest -m gpu -q -p no:cacheprovider \
      "tests/test_gpu_layer.py::test_kernels_compiled_without_spills[deepseek-v4-flash]") > $D/T.txt 2>&1
   grep -E "passed|failed|error|seed|assert" $D/T.txt | tail -8 ;;
G8) timeout -k 5 ${G8_LIMIT:-500} python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider > $D/G8.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G8.txt | tail -8 ;;
GB) (export MOEGEN_TEST_KERNELS=default
     timeout -k 5 ${GB_BUILD_LIMIT:-330} python3 lab/build_test_libs.py --bf16 | tail -3
     timeout -k 5 ${G_LIMIT:-240} python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider) > $D/GB.txt 2>&1
   grep -E "built|passed|failed|error|seed" $D/GB.txt | tail -14 ;;
A) grep -l -E "[1-9][0-9]* bytes spill stores|C751" generated/_gputest/*/sm90/logs/*.log generated/*/sm90/logs/*.log 2>/dev/null \
     > $D/A.txt; echo "kernels with spills or C751x: $(wc -l < $D/A.txt)"; head -20 $D/A.txt
   ls generated/_gputest/*/sm90/logs/moegen_*.log | wc -l ;;
G) timeout -k 5 ${G_LIMIT:-500} python3 -m pytest -m gpu tests/test_gpu_layer.py ${GPU_VARIANTS:+-k "$GPU_VARIANTS"} -q -p no:cacheprovider > $D/G.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G.txt | tail -8 ;;
*) echo "unknown part $part" ;;
esac
done
