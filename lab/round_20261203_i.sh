#!/usr/bin/env bash
# Round i (2026-12-03):
#   W   BF16 consumers issuing each k16 block's wgmmas as soon as it is widened
#       (lab/experiments/run_widen_and_issue.sh): bit for bit against the shipped mainloop, then
#       `moegen bench` of both, base listed first.
#   W2  the same bench, the interleaved library listed first.
#   K   the decode GEMMs without their waits (lab/experiments/run_gemm_skip_waits.sh run): CUDA-graph
#       timelines at T = 1 and 4 with GEMM1 and GEMM2 skipping their pdl_waits.
#   G8  the W4A8 GPU tests, every variant, on the tests' libraries rebuilt at 00bc752.
#   G   the BF16 GPU tests of the variants whose libraries are current (the others would build here).
# Each part's output goes to $OUT/<part>.txt (DEVICE_OUT) and its tail to stdout.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
for part in "$@"; do
case $part in
W) (bash lab/experiments/run_widen_and_issue.sh bitwise; DEVICE_OUT=$D bash lab/experiments/run_widen_and_issue.sh run) > $D/W.txt 2>&1
   tail -40 $D/W.txt ;;
W2) DEVICE_OUT=$D bash lab/experiments/run_widen_and_issue.sh run_reversed > $D/W2.txt 2>&1; tail -30 $D/W2.txt ;;
K) bash lab/experiments/run_gemm_skip_waits.sh run > $D/K.txt 2>&1; tail -60 $D/K.txt ;;
G8) timeout -k 5 400 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider > $D/G8.txt 2>&1
   tail -5 $D/G8.txt ;;
G) timeout -k 5 400 python3 -m pytest -m gpu tests/test_gpu_layer.py -k "${GPU_VARIANTS:?}" -q -p no:cacheprovider > $D/G.txt 2>&1
   tail -5 $D/G.txt ;;
*) echo "unknown part $part" ;;
esac
done
