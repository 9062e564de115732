#!/usr/bin/env bash
# Round l (2026-12-04): W4A8's GEMM2 decode tiles (fp8, one 64-row slice, at most 16 token rows)
# quantize their own `h` rows into shared memory, K tile kt into B slot kt, once GEMM1 has finished
# the expert (GroupedGemm::kQuantizesB); no quantizer kernel, no gather between the GEMMs, up to 8
# tokens.  generated/_exp/fin/fin: 5dedee8's default builds (W4A8 and BF16); generated/_exp/qb/new: the
# change's W4A8 default builds.
#   X   bit for bit: new against fin (outputs, ids, weights), W4A8, T = 1-9, 17, 33, 300; plain and skewed.
#   W   `moegen bench`: W4A8 new listed first with W4A8 fin and W4A16 fin, then fin first; T = 1, 2, 3, 4, 6, 8, 16.
#   L   CUDA-graph timelines (tools/timeline.py), new and fin W4A8, T = 1, 2, 4, 8: when GEMM2 ends after GEMM1.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
F=generated/_exp/fin/fin
N=generated/_exp/qb/new
MODELS=${MODELS:-qwen3-30b-a3b gpt-oss-120b deepseek-v4-flash}
mkdir -p /tmp/json
for part in "$@"; do
case $part in
X) (for M in $MODELS; do echo "== $M"
      timeout -k 5 150 python3 lab/bitwise_ab.py $F/$M-w4a8/sm90 $N/$M-w4a8/sm90 $M --activations fp8 \
        --tokens 1,2,3,4,5,6,7,8,9,17,33,300 2>&1 | grep -v ": equal" | tail -4
    done) > $D/X.txt 2>&1; tail -14 $D/X.txt ;;
W) (for M in $MODELS; do echo "== $M"
      timeout -k 5 200 python3 -m moegen bench --model $M --activations fp8 --out $N --compare w4a8-fin=$F/$M-w4a8/sm90 \
        --compare w4a16=$F/$M/sm90 --tokens ${W_TOKENS:-1,2,3,4,6,8,16} --rounds 4 --json /tmp/json/w_${M}_1.json | grep -E " T=|ceiling"
      timeout -k 5 200 python3 -m moegen bench --model $M --activations fp8 --out $F --compare w4a8-new=$N/$M-w4a8/sm90 \
        --compare w4a16=$F/$M/sm90 --tokens ${W_TOKENS:-1,2,3,4,6,8,16} --rounds 4 --json /tmp/json/w_${M}_2.json | grep -E " T=|ceiling"
    done) > $D/W.txt 2>&1; tail -60 $D/W.txt; tar czf $D/json.tgz -C /tmp json ;;
L) (for M in qwen3-30b-a3b gpt-oss-120b; do for v in $F $N; do echo "== $M $v"
      timeout -k 5 100 python3 tools/timeline.py $M-w4a8 1,2,4,8 $v/$M-w4a8/sm90; done; done) > $D/L.txt 2>&1
   grep -E "==|T=|gemm|quantiz" $D/L.txt | head -80 ;;
*) echo "unknown part $part" ;;
esac
done
