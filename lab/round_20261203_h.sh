#!/usr/bin/env bash
# Round h (2026-12-03):
#   L  the routing kernel prefetching the chosen experts' first GEMM1 atoms into L2
#      (lab/experiments/run_l2_prefetch_in_routing.sh run: bit for bit on/off, timelines over atom counts).
#   N  narrower wgmma widths for partial N tiles, kNStep = BN / 8 (lab/experiments/run_nstep8.sh run:
#      bit for bit against the same kernels at BN / 4, then `moegen bench` of both at T = 1024-16384).
#   N2 the same bench with the step8 library listed first.
#   S  per-CTA timelines of the decode GEMMs (lab/experiments/run_gemm_cta_stamps.sh run).
#   G  the GPU tests of gpt-oss-120b (the one test variant with 256-wide tiles) on its library rebuilt
#      with 2bbf76e's 8-width n256 kernels.
#   GA the GPU tests of every BF16 variant on the tests' libraries rebuilt at HEAD.
# Each part's output goes to $OUT/<part>.txt (DEVICE_OUT) and its tail to stdout.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
for part in "$@"; do
case $part in
L) bash lab/experiments/run_l2_prefetch_in_routing.sh run > $D/L.txt 2>&1; tail -40 $D/L.txt ;;
N) DEVICE_OUT=$D bash lab/experiments/run_nstep8.sh run > $D/N.txt 2>&1; tail -30 $D/N.txt ;;
N2) DEVICE_OUT=$D bash lab/experiments/run_nstep8.sh run_reversed > $D/N2.txt 2>&1; tail -30 $D/N2.txt ;;
S) bash lab/experiments/run_gemm_cta_stamps.sh run > $D/S.txt 2>&1; grep -v Warn $D/S.txt | tail -40 ;;
G) timeout -k 5 400 python3 -m pytest -m gpu tests/test_gpu_layer.py -k gpt-oss-120b -q -p no:cacheprovider > $D/G.txt 2>&1
   tail -5 $D/G.txt ;;
GA) timeout -k 5 400 python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider > $D/GA.txt 2>&1
   tail -5 $D/GA.txt ;;
*) echo "unknown part $part" ;;
esac
done
