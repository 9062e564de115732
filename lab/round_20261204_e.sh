#!/usr/bin/env bash
# Round e (2026-12-04): GEMM2's per-expert wait targets all of its expert's rows, not the rows up to
# its tile's end (the counter sums whatever finished first, so a prefix of the count is not a prefix
# of the rows; within the default window, up to 8 tokens, an expert's rows fit one tile and the two
# targets agree).  generated/_exp/fix: DeepSeek-V4-Flash's default builds at the fix.
#   B   bit for bit against b646d6f's builds (generated/_exp/follow/new), BF16 and W4A8.
#   X   with MOEGEN_GEMM2_WAIT=expert (experts over several tiles from 16 tokens): W4A8 at the fix
#       against 894a668's (generated/_exp/follow/base, which ignores the switch), and BF16 likewise
#       (894a668's BF16 honours it with the old target).
#   P   `moegen bench --activations fp8`, the fix against b646d6f, T = 1-8, one order each.
#   G8  the W4A8 GPU tests (tests/test_gpu_w4a8.py), every variant.
#   GB  the BF16 GPU tests of DeepSeek-V4-Flash's variants on the default kernels (its objects carried in
#       generated/.objects; the EP rank's compile on the device).
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
F=generated/_exp/fix
X=generated/_exp/follow
M=deepseek-v4-flash
for part in "$@"; do
case $part in
B) (timeout -k 5 150 python3 lab/bitwise_ab.py $X/new/$M/sm90 $F/$M/sm90 $M --tokens 1,2,3,4,5,8,9,33,300,2100 2>&1 \
      | grep -v ": equal" | tail -4
    timeout -k 5 120 python3 lab/bitwise_ab.py $X/new/$M-w4a8/sm90 $F/$M-w4a8/sm90 $M --activations fp8 \
      --tokens 1,2,3,4,5,8,9,33,300,2100 2>&1 | grep -v ": equal" | tail -4) > $D/B.txt 2>&1; tail -10 $D/B.txt ;;
X) (export MOEGEN_GEMM2_WAIT=expert
    timeout -k 5 120 python3 lab/bitwise_ab.py $X/base/$M-w4a8/sm90 $F/$M-w4a8/sm90 $M --activations fp8 \
      --tokens 16,33,64,300,1024 2>&1 | grep -v ": equal" | tail -6
    timeout -k 5 150 python3 lab/bitwise_ab.py $X/base/$M/sm90 $F/$M/sm90 $M --tokens 16,33,64,300,1024 2>&1 \
      | grep -v ": equal" | tail -6) > $D/X.txt 2>&1; tail -14 $D/X.txt ;;
P) (timeout -k 5 150 python3 -m moegen bench --model $M --activations fp8 --out $F --compare b646d6f=$X/new/$M-w4a8/sm90 \
      --tokens 1,2,4,8 --rounds 4 | grep " T="
    timeout -k 5 150 python3 -m moegen bench --model $M --activations fp8 --out $X/new --compare fix=$F/$M-w4a8/sm90 \
      --tokens 1,2,4,8 --rounds 4 | grep " T=") > $D/P.txt 2>&1; tail -16 $D/P.txt ;;
G8) timeout -k 5 ${G8_LIMIT:-500} python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider > $D/G8.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G8.txt | tail -8 ;;
GB) MOEGEN_TEST_KERNELS=default timeout -k 5 ${GB_LIMIT:-400} python3 -m pytest -m gpu tests/test_gpu_layer.py \
      -k deepseek-v4-flash -q -p no:cacheprovider > $D/GB.txt 2>&1
   grep -E "passed|failed|error|seed" $D/GB.txt | tail -8 ;;
*) echo "unknown part $part" ;;
esac
done
