#!/usr/bin/env bash
# Round m (2026-12-04): does the shared-memory carveout explain round l's losses?  Round l's fused GEMM2
# (`lab/experiments/gemm2_quantizes_into_smem.patch`, BN x K bytes of B slots per CTA) lost most where K
# is long (gpt-oss-120b T = 1: +18 %), even with one or two CTAs per SM.  Lab builds whose every layer
# kernel prefers the largest carveout (cudaFuncAttributePreferredSharedMemoryCarveout = MaxShared, set
# before each launch), so that no SM reconfigures between kernels that PDL lets overlap:
#   generated/_exp/fin/fin   5dedee8's default builds (the baseline)
#   generated/_exp/qb/new    round l's fused GEMM2
#   generated/_exp/qb/car    58a2544 + the carveout (W4A8 and BF16)
#   generated/_exp/qb/newcar the fused GEMM2 + the carveout (W4A8)
#   W   `moegen bench`, W4A8 of gpt-oss-120b and DeepSeek-V4-Flash: fin, new, car, newcar; then newcar first.
#   B   `moegen bench`, BF16 of the same two: fin against car, both orders; T = 1, 4, 16, 64.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
F=generated/_exp/fin/fin
Q=generated/_exp/qb
MODELS=${MODELS:-gpt-oss-120b deepseek-v4-flash}
mkdir -p /tmp/json
for part in "$@"; do
case $part in
W) (for M in $MODELS; do echo "== $M"
      timeout -k 5 250 python3 -m moegen bench --model $M --activations fp8 --out $F --compare new=$Q/new/$M-w4a8/sm90 \
        --compare car=$Q/car/$M-w4a8/sm90 --compare newcar=$Q/newcar/$M-w4a8/sm90 --tokens ${W_TOKENS:-1,2,4,6,8} \
        --rounds 4 --json /tmp/json/m_${M}_1.json | grep -E " T=|ceiling"
      timeout -k 5 250 python3 -m moegen bench --model $M --activations fp8 --out $Q/newcar --compare car=$Q/car/$M-w4a8/sm90 \
        --compare new=$Q/new/$M-w4a8/sm90 --compare fin=$F/$M-w4a8/sm90 --tokens ${W_TOKENS:-1,2,4,6,8} \
        --rounds 4 --json /tmp/json/m_${M}_2.json | grep -E " T=|ceiling"
    done) > $D/W.txt 2>&1; tail -50 $D/W.txt; tar czf $D/json.tgz -C /tmp json ;;
B) (for M in $MODELS; do echo "== $M"
      timeout -k 5 150 python3 -m moegen bench --model $M --out $F --compare car=$Q/car/$M/sm90 --tokens ${B_TOKENS:-1,4,16,64} \
        --rounds 4 --json /tmp/json/b_${M}_1.json | grep -E " T=|ceiling"
      timeout -k 5 150 python3 -m moegen bench --model $M --out $Q/car --compare fin=$F/$M/sm90 --tokens ${B_TOKENS:-1,4,16,64} \
        --rounds 4 --json /tmp/json/b_${M}_2.json | grep -E " T=|ceiling"
    done) > $D/B.txt 2>&1; tail -40 $D/B.txt; tar czf $D/json.tgz -C /tmp json ;;
*) echo "unknown part $part" ;;
esac
done
