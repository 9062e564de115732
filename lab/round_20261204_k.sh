#!/usr/bin/env bash
# Round k (2026-12-04): W4A8 decode tiles (one 64-row slice, at most 16 token rows) with two partial-sum
# sets, so a K tile's wgmmas start before the previous tile's retire and are promoted (a round's first
# tile still waits).  generated/_exp/pp/new: the W4A8 default builds with it; generated/_exp/fin/fin:
# 5dedee8's (without), and its BF16 builds.
#   X   bit for bit: new against 5dedee8, every kernel of the default builds, T = 1, 3, 8, 16, 37, 64,
#       256, 2100, plain and skewed.
#   W   `moegen bench`: W4A16 listed first, then 5dedee8's W4A8 and the new one; T = 1, 2, 4, 8, 16, 64, 256.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
F=generated/_exp/fin/fin
N=generated/_exp/pp/new
MODELS=${MODELS:-qwen3-30b-a3b gpt-oss-120b deepseek-v4-flash}
for part in "$@"; do
case $part in
X) (for M in $MODELS; do echo "== $M"
      timeout -k 5 120 python3 lab/bitwise_ab.py $F/$M-w4a8/sm90 $N/$M-w4a8/sm90 $M --activations fp8 \
        --tokens 1,3,8,16,37,64,256,2100 2>&1 | grep -v ": equal" | tail -3
    done) > $D/X.txt 2>&1; cat $D/X.txt ;;
W) (for M in $MODELS; do echo "== $M"
      timeout -k 5 200 python3 -m moegen bench --model $M --out $F --compare head=$F/$M-w4a8/sm90 \
        --compare pipelined=$N/$M-w4a8/sm90 --tokens ${W_TOKENS:-1,2,4,8,16,64,256} --rounds 4 | grep -E " T=|ceiling"
    done) > $D/W.txt 2>&1; cat $D/W.txt ;;
*) echo "unknown part $part" ;;
esac
done
