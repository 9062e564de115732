#!/usr/bin/env bash
# Round a (2026-12-04): W4A8 following GEMM1 per expert from 2 to 8 tokens (the `h` quantizer waits
# on GEMM1's per-expert counters and GEMM2 on the quantizer's), as BF16 has since 94238a7.
#   F   bit for bit: DeepSeek-V4-Flash's default W4A8 build at the working tree (generated/_exp/follow/new)
#       against 894a668's (generated/_exp/follow/base); then `moegen bench --activations fp8`, T = 1-16,
#       both orders.
#   E   the same, MOEGEN_GEMM2_WAIT=expert (the new build follows at every T; the base ignores it), T = 1,
#       16, 32: whether the window should grow.
#   W   the new W4A8 build against the new default BF16 build (generated/_exp/follow/new), one run each
#       order, T = 1-64 (issue 21's small-T bar).
#   M   compute-sanitizer memcheck (tools/sanitize_run.py) on the new W4A8 build (its T = 3 follows).
#   G8  the W4A8 GPU tests (tests/test_gpu_w4a8.py), every variant.
# Each part's output goes to $OUT/<part>.txt and its tail to stdout.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
X=generated/_exp/follow
M=deepseek-v4-flash
for part in "$@"; do
case $part in
F) (timeout -k 5 200 python3 lab/bitwise_ab.py $X/base/$M-w4a8/sm90 $X/new/$M-w4a8/sm90 $M --activations fp8 \
      --tokens 1,2,3,4,5,8,9,33,300 2>&1 | grep -v ": equal" | tail -4
    timeout -k 5 200 python3 -m moegen bench --model $M --activations fp8 --out $X/base \
      --compare follow=$X/new/$M-w4a8/sm90 --tokens ${TOKENS:-1,2,3,4,6,8,16} --rounds 4 --json $D/follow.json | tail -12
    timeout -k 5 200 python3 -m moegen bench --model $M --activations fp8 --out $X/new \
      --compare grid=$X/base/$M-w4a8/sm90 --tokens ${TOKENS:-1,2,3,4,6,8,16} --rounds 4 --json $D/follow_rev.json | tail -12
   ) > $D/F.txt 2>&1; tail -34 $D/F.txt ;;
E) (for o in 1 2; do
     if [ $o = 1 ]; then a=$X/base b=$X/new/$M-w4a8/sm90 l=follow; else a=$X/new b=$X/base/$M-w4a8/sm90 l=grid; fi
     MOEGEN_GEMM2_WAIT=expert timeout -k 5 200 python3 -m moegen bench --model $M --activations fp8 --out $a \
       --compare $l=$b --tokens 1,16,32 --rounds 4 --json $D/expert_$o.json | tail -6
   done) > $D/E.txt 2>&1; tail -14 $D/E.txt ;;
W) (timeout -k 5 200 python3 -m moegen bench --model $M --activations fp8 --out $X/new \
      --compare w4a16=$X/new/$M/sm90 --tokens ${W_TOKENS:-1,2,4,8,16,64} --rounds 4 --json $D/w4a8_vs_w4a16.json | tail -10
    timeout -k 5 200 python3 -m moegen bench --model $M --out $X/new \
      --compare w4a8=$X/new/$M-w4a8/sm90 --tokens ${W_TOKENS:-1,2,4,8,16,64} --rounds 4 --json $D/w4a16_vs_w4a8.json | tail -10
   ) > $D/W.txt 2>&1; tail -22 $D/W.txt ;;
M) timeout -k 5 ${M_LIMIT:-200} compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py \
     $X/new/$M-w4a8/sm90 > $D/M.txt 2>&1; echo "rc $?" >> $D/M.txt; tail -4 $D/M.txt ;;
G8) timeout -k 5 ${G8_LIMIT:-500} python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider > $D/G8.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G8.txt | tail -8 ;;
*) echo "unknown part $part" ;;
esac
done
