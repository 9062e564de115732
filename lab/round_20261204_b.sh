#!/usr/bin/env bash
# Round b (2026-12-04): W4A8 following GEMM1 per expert from 1 to 8 tokens, every shipped model.
#   B   bit for bit against 894a668 (generated/_exp/follow/base): DeepSeek-V4-Flash's default BF16
#       build (its kernels are re-rendered with the progress flag as a template parameter) and its W4A8
#       build, T = 1-9 and beyond the window.
#   W   W4A8 against W4A16 at T = 1-64 (issue 21's small-T bar), one run per order, per model:
#       W4A8 from the GPU tests' libraries (generated/_gputest: the shipped table's picks and the
#       fallbacks; DeepSeek-V4-Flash from generated/_exp/follow/new), W4A16 the default BF16 builds in
#       generated/_exp/follow/new.  MODELS overrides the list.
#   G8  the W4A8 GPU tests (tests/test_gpu_w4a8.py), every variant.
# Each part's output goes to $OUT/<part>.txt and its tail to stdout.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
X=generated/_exp/follow
for part in "$@"; do
case $part in
B) (M=deepseek-v4-flash
    timeout -k 5 150 python3 lab/bitwise_ab.py $X/base/$M/sm90 $X/new/$M/sm90 $M \
      --tokens 1,2,3,4,5,8,9,33,300,2100 2>&1 | grep -v ": equal" | tail -4
    timeout -k 5 100 python3 lab/bitwise_ab.py $X/base/$M-w4a8/sm90 $X/new/$M-w4a8/sm90 $M --activations fp8 \
      --tokens 1,2,7,8,9 2>&1 | grep -v ": equal" | tail -4) > $D/B.txt 2>&1; tail -10 $D/B.txt ;;
W) (for M in ${MODELS:-deepseek-v4-flash qwen3-30b-a3b gpt-oss-120b deepseek-v3}; do
      if [ $M = deepseek-v4-flash ]; then Q=$X/new; else Q=generated/_gputest; fi
      echo "== $M"
      timeout -k 5 150 python3 -m moegen bench --model $M --activations fp8 --out $Q \
        --compare w4a16=$X/new/$M/sm90 --tokens ${W_TOKENS:-1,2,4,8,16,64} --rounds 4 --json $D/w_${M}_1.json | grep " T="
      timeout -k 5 150 python3 -m moegen bench --model $M --out $X/new \
        --compare w4a8=$Q/$M-w4a8/sm90 --tokens ${W_TOKENS:-1,2,4,8,16,64} --rounds 4 --json $D/w_${M}_2.json | grep " T="
    done) > $D/W.txt 2>&1; tail -60 $D/W.txt ;;
G8) timeout -k 5 ${G8_LIMIT:-500} python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider > $D/G8.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G8.txt | tail -8 ;;
*) echo "unknown part $part" ;;
esac
done
