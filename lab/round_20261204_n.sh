#!/usr/bin/env bash
# Round n (2026-12-04): the GPU tests at 5ee2ad1 (58a2544's kernels: finalize without its routing_done
# argument), on libraries built here (`lab/build_test_libs.py --w4a8 --sequential`, then with
# MOEGEN_TEST_KERNELS=default `--bf16 --sequential`) and carried in generated/_gputest.
#   G8  tests/test_gpu_w4a8.py and tests/test_quantize_gpu.py (every W4A8 variant).
#   GB1 tests/test_gpu_layer.py on the variants the last rerun left out: DeepSeek-V3, gpt-oss-20b (and
#       --tp 2), the grouped-routing spec.
#   GB2 the same on DeepSeek-V4-Flash, gpt-oss-120b and Qwen3-30B-A3B (their EP ranks included).
#   L   CUDA-graph timelines (tools/timeline.py) of 5dedee8's default builds (generated/_exp/fin/fin),
#       W4A16 and W4A8 of Qwen3-30B-A3B and gpt-oss-120b, T = 1, 2, 3, 4: where W4A8's chain loses.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
export MOEGEN_TEST_KERNELS=default
for part in "$@"; do
case $part in
G8) (timeout -k 5 ${G8_LIMIT:-200} python3 -m pytest -m gpu tests/test_gpu_w4a8.py tests/test_quantize_gpu.py -q -p no:cacheprovider 2>&1) > $D/G8.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G8.txt | tail -8 ;;
GB1) (timeout -k 5 ${GB_LIMIT:-300} python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider \
      -k "deepseek-v3 or gpt-oss-20b or grouped" 2>&1) > $D/GB1.txt 2>&1
   grep -E "passed|failed|error|seed" $D/GB1.txt | tail -8 ;;
GB2) (timeout -k 5 ${GB_LIMIT:-300} python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider \
      -k "deepseek-v4-flash or gpt-oss-120b or qwen3" 2>&1) > $D/GB2.txt 2>&1
   grep -E "passed|failed|error|seed" $D/GB2.txt | tail -8 ;;
L) (for M in qwen3-30b-a3b gpt-oss-120b; do for v in $M $M-w4a8; do echo "== $v"
      timeout -k 5 100 python3 tools/timeline.py $v 1,2,3,4 generated/_exp/fin/fin/$v/sm90; done; done) > $D/L.txt 2>&1
   grep -E "==|T=|gemm|quantiz|route|final" $D/L.txt | head -120 ;;
*) echo "unknown part $part" ;;
esac
done
