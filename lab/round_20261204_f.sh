#!/usr/bin/env bash
# Round f (2026-12-04): W4A8's one-block routing no longer waits for its hidden-row quantizer.  The
# quantizing warps met the routing warps at the block-wide barrier before the schedule, so the
# quantizer's loads and amax exchange sat in the chain to GEMM1; now the routing warps meet on named
# barriers of their own and the rest quantize beside them.  generated/_exp/ob/<v>/<model>-w4a8: base
# (HEAD before the change, one block up to 2 tokens) and the change with one block up to 2, 4 or 8
# tokens (m2, m4, m8); the GEMM objects are the same.
#   X   bit for bit: m8 against base (outputs, ids, weights), T = 1-9, 33, 300, plain and skewed.
#   W   `moegen bench --activations fp8`, m8 listed first with base, m2, m4 and W4A16
#       (generated/_exp/follow/new), then again with W4A16 listed first; T = 1-8.
#   L   CUDA-graph timelines (tools/timeline.py), base and m8, T = 1, 2, 4, 8: where the routing ends.
#   G8  the W4A8 GPU tests (tests/test_gpu_w4a8.py), every variant, libraries with one block up to 8.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
O=generated/_exp/ob
X=generated/_exp/follow/new
MODELS=${MODELS:-qwen3-30b-a3b gpt-oss-120b deepseek-v4-flash}
mkdir -p /tmp/json
for part in "$@"; do
case $part in
X) (for M in $MODELS; do echo "== $M"
      timeout -k 5 120 python3 lab/bitwise_ab.py $O/base/$M-w4a8/sm90 $O/m8/$M-w4a8/sm90 $M --activations fp8 \
        --tokens 1,2,3,4,5,6,7,8,9,33,300 2>&1 | grep -v ": equal" | tail -4
    done) > $D/X.txt 2>&1; tail -16 $D/X.txt ;;
W) (for M in $MODELS; do echo "== $M"
      timeout -k 5 200 python3 -m moegen bench --model $M --activations fp8 --out $O/m8 --compare base=$O/base/$M-w4a8/sm90 \
        --compare m2=$O/m2/$M-w4a8/sm90 --compare m4=$O/m4/$M-w4a8/sm90 --compare w4a16=$X/$M/sm90 \
        --tokens ${W_TOKENS:-1,2,3,4,6,8} --rounds 4 --json /tmp/json/w_${M}_1.json | grep -E " T=|ceiling"
      timeout -k 5 200 python3 -m moegen bench --model $M --out $X --compare m8=$O/m8/$M-w4a8/sm90 \
        --compare base=$O/base/$M-w4a8/sm90 --compare m2=$O/m2/$M-w4a8/sm90 --compare m4=$O/m4/$M-w4a8/sm90 \
        --tokens ${W_TOKENS:-1,2,3,4,6,8} --rounds 4 --json /tmp/json/w_${M}_2.json | grep -E " T=|ceiling"
    done) > $D/W.txt 2>&1; tail -90 $D/W.txt; tar czf $D/json.tgz -C /tmp json ;;
L) (for M in ${L_MODELS:-qwen3-30b-a3b deepseek-v4-flash}; do
      for v in base m8; do echo "== $M $v"; timeout -k 5 100 python3 tools/timeline.py $M-w4a8 1,2,4,8 $O/$v/$M-w4a8/sm90; done
    done) > $D/L.txt 2>&1; tail -120 $D/L.txt ;;
G8) timeout -k 5 ${G8_LIMIT:-500} python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider > $D/G8.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G8.txt | tail -8 ;;
*) echo "unknown part $part" ;;
esac
done
