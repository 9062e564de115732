#!/usr/bin/env bash
# Round c (2026-12-04): W4A8's small-T buckets retuned now that its `h` quantizer and GEMM2 follow
# GEMM1 per expert up to 8 tokens (the shipped tables were tuned before, on the grid-wide wait).
#   T   `moegen tune --activations fp8 --no-build --buckets 1,2,4,8` over the shortlist libraries built
#       here (generated/_exp/tune), into the checkout's configs/dispatch (the shipped tables keep their
#       other buckets); the tables and the tuner's output go to $OUT.  MODELS overrides the list.
#   W   the retuned W4A8 (shortlist library, new table) against W4A16 (generated/_exp/follow/new), one
#       run per order, T = 1-16, for the models with a W4A16 build.
#   L   CUDA-graph timelines (tools/timeline.py) of Qwen3-30B-A3B and gpt-oss-120b at T = 1, 2, 4, W4A8
#       (shortlist library, retuned table) and W4A16: where W4A8's extra microseconds go.
#   G8  the W4A8 GPU tests (tests/test_gpu_w4a8.py), every variant.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
X=generated/_exp/follow
Y=generated/_exp/tune
T_MODELS=${MODELS:-qwen3-30b-a3b gpt-oss-120b gpt-oss-20b}
for part in "$@"; do
case $part in
T) mkdir -p $D/dispatch
   for M in $T_MODELS; do
     echo "== $M"
     timeout -k 5 200 python3 -m moegen tune --model $M --activations fp8 --no-build --kernels shortlist \
       --buckets ${T_BUCKETS:-1,2,4,8} --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 \
       --out $Y --table-root configs/dispatch 2>&1 | tail -12
   done > $D/T.txt 2>&1
   cp configs/dispatch/sm90/nvidia-h200-132sm/*-fp8.json $D/dispatch/; tail -50 $D/T.txt ;;
W) (for M in ${W_MODELS:-qwen3-30b-a3b gpt-oss-120b}; do
      echo "== $M"
      timeout -k 5 150 python3 -m moegen bench --model $M --activations fp8 --out $Y \
        --compare w4a16=$X/new/$M/sm90 --tokens ${W_TOKENS:-1,2,4,8,16} --rounds 4 --json $D/w_${M}_1.json | grep " T="
      timeout -k 5 150 python3 -m moegen bench --model $M --out $X/new \
        --compare w4a8=$Y/$M-w4a8/sm90 --tokens ${W_TOKENS:-1,2,4,8,16} --rounds 4 --json $D/w_${M}_2.json | grep " T="
    done) > $D/W.txt 2>&1; tail -44 $D/W.txt ;;
L) (for M in ${L_MODELS:-qwen3-30b-a3b gpt-oss-120b}; do
      echo "== $M w4a8"; timeout -k 5 100 python3 tools/timeline.py $M-w4a8 1,2,4 $Y/$M-w4a8/sm90
      echo "== $M w4a16"; timeout -k 5 100 python3 tools/timeline.py $M 1,2,4 $X/new/$M/sm90
    done) > $D/L.txt 2>&1; tail -80 $D/L.txt ;;
G8) timeout -k 5 ${G8_LIMIT:-500} python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider > $D/G8.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G8.txt | tail -8 ;;
*) echo "unknown part $part" ;;
esac
done
