#!/usr/bin/env bash
# Round g (2026-12-04): finalize looks up a token's rows (token_row, the routing's) before its pdl_wait,
# so only the GEMM2 rows' loads follow GEMM2's end.  generated/_exp/fin/<v>: head (5510bba) and fin
# (the change), default builds: W4A8 of three models, BF16 of the same (head: DeepSeek-V4-Flash only).
#   X   bit for bit: fin against head (outputs, ids, weights), BF16 and W4A8, T = 1-9, 33, 300, 2100.
#   W   `moegen bench`: W4A8 fin listed first with W4A8 head, BF16 fin (and head), then the reverse
#       order; T = 1, 2, 4, 8, 64, 1024.  Also issue 21's W4A8 against W4A16 on current code.
#   L   CUDA-graph timelines (tools/timeline.py) of DeepSeek-V4-Flash BF16, head and fin, T = 1, 4, 64: when
#       finalize ends after GEMM2.
#   G8  the W4A8 GPU tests (tests/test_gpu_w4a8.py, every variant) and the quantizer tests.
#   GB  the BF16 GPU tests of DeepSeek-V4-Flash, gpt-oss-120b and Qwen3-30B-A3B's variants on their
#       default kernels (objects carried; the EP ranks' kernels compile on the device).
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
F=generated/_exp/fin
MODELS=${MODELS:-qwen3-30b-a3b gpt-oss-120b deepseek-v4-flash}
mkdir -p /tmp/json
for part in "$@"; do
case $part in
X) (for M in $MODELS; do echo "== $M"
      timeout -k 5 120 python3 lab/bitwise_ab.py $F/head/$M-w4a8/sm90 $F/fin/$M-w4a8/sm90 $M --activations fp8 \
        --tokens 1,2,3,4,5,6,7,8,9,33,300,2100 2>&1 | grep -v ": equal" | tail -3
    done
    M=deepseek-v4-flash; echo "== $M bf16"
    timeout -k 5 150 python3 lab/bitwise_ab.py $F/head/$M/sm90 $F/fin/$M/sm90 $M --tokens 1,2,3,4,5,8,9,33,300,2100 2>&1 \
      | grep -v ": equal" | tail -3) > $D/X.txt 2>&1; tail -14 $D/X.txt ;;
W) (for M in $MODELS; do echo "== $M"
      H=""; [ -f $F/head/$M/sm90/manifest.json ] && H="--compare w4a16-head=$F/head/$M/sm90"
      timeout -k 5 200 python3 -m moegen bench --model $M --activations fp8 --out $F/fin --compare w4a8-head=$F/head/$M-w4a8/sm90 \
        --compare w4a16=$F/fin/$M/sm90 $H --tokens ${W_TOKENS:-1,2,4,8,64,1024} --rounds 4 --json /tmp/json/w_${M}_1.json | grep -E " T=|ceiling"
      timeout -k 5 200 python3 -m moegen bench --model $M --out $F/fin $H --compare w4a8-head=$F/head/$M-w4a8/sm90 \
        --compare w4a8=$F/fin/$M-w4a8/sm90 --tokens ${W_TOKENS:-1,2,4,8,64,1024} --rounds 4 --json /tmp/json/w_${M}_2.json | grep -E " T=|ceiling"
    done) > $D/W.txt 2>&1; tail -60 $D/W.txt; tar czf $D/json.tgz -C /tmp json ;;
L) (for v in head fin; do echo "== $v"; timeout -k 5 100 python3 tools/timeline.py deepseek-v4-flash 1,4,64 $F/$v/deepseek-v4-flash/sm90; done) \
     > $D/L.txt 2>&1; grep -E "==|T=|gemm2|finalize" $D/L.txt ;;
G8) (timeout -k 5 ${G8_LIMIT:-300} python3 -m pytest -m gpu tests/test_gpu_w4a8.py tests/test_quantize_gpu.py -q -p no:cacheprovider 2>&1) > $D/G8.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G8.txt | tail -8 ;;
GB) (MOEGEN_TEST_KERNELS=default timeout -k 5 ${GB_LIMIT:-400} python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider \
      -k "deepseek-v4-flash or gpt-oss-120b or qwen3" 2>&1) > $D/GB.txt 2>&1
   grep -E "passed|failed|error|seed" $D/GB.txt | tail -8 ;;
*) echo "unknown part $part" ;;
esac
done
