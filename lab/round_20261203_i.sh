#!/usr/bin/env bash
# Round i (2026-12-03):
#   W   BF16 consumers issuing each k16 block's wgmmas as soon as it is widened
#       (lab/experiments/run_widen_and_issue.sh): bit for bit against the shipped mainloop, then
#       `moegen bench` of both, base listed first.
#   W2  the same bench, the interleaved library listed first.
#   K   the decode GEMMs without their waits (lab/experiments/run_gemm_skip_waits.sh run): CUDA-graph
#       timelines at T = 1 and 4 with GEMM1 and GEMM2 skipping their pdl_waits.
#   E   GEMM2 following GEMM1 per expert (GemmParams::progress_add / progress_wait) against the same
#       kernels waiting for all of GEMM1 (the round's base libraries, 1f223b2): bit for bit, then
#       `moegen bench` of both, base listed first.  E2: the same bench, the new library listed first.
#   F   the same two libraries with the layer's policy (per expert from 2 to 16 tokens) at T = 1-64, base
#       listed first; F2 the new library listed first.
#   GP  the BF16 GPU tests of deepseek-v4-flash and gpt-oss-120b as built, then with
#       MOEGEN_GEMM2_WAIT=expert (GEMM2 following GEMM1 per expert at every T).
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
E) for m in deepseek-v4-flash gpt-oss-120b; do
     echo "== $m"
     timeout -k 5 200 python3 lab/bitwise_ab.py generated/_exp/widen_issue/base/$m/sm90 \
       generated/_exp/expert_progress/$m/sm90 $m --tokens 1,4,5,33,97,300,1030,4100 2>&1 | tail -2
     timeout -k 5 400 python3 -m moegen bench --model $m --out generated/_exp/widen_issue/base \
       --compare progress=generated/_exp/expert_progress/$m/sm90 --tokens ${TOKENS:-1,4,16,64,256,1024,4096,16384} \
       --rounds 4 --json $D/progress_$m.json 2>&1 | tail -18
   done > $D/E.txt 2>&1; tail -50 $D/E.txt ;;
E2) for m in deepseek-v4-flash gpt-oss-120b; do
     echo "== $m"
     timeout -k 5 400 python3 -m moegen bench --model $m --out generated/_exp/expert_progress \
       --compare base=generated/_exp/widen_issue/base/$m/sm90 --tokens ${TOKENS:-1,4,16,64,256,1024,4096,16384} \
       --rounds 4 --json $D/progress_rev_$m.json 2>&1 | tail -18
   done > $D/E2.txt 2>&1; tail -40 $D/E2.txt ;;
F) for m in deepseek-v4-flash gpt-oss-120b; do
     echo "== $m"
     timeout -k 5 300 python3 -m moegen bench --model $m --out generated/_exp/widen_issue/base \
       --compare progress=generated/_exp/expert_progress/$m/sm90 --tokens 1,2,4,8,16,32,64 \
       --rounds 4 --json $D/policy_$m.json 2>&1 | tail -16
   done > $D/F.txt 2>&1; tail -40 $D/F.txt ;;
F2) for m in deepseek-v4-flash gpt-oss-120b; do
     echo "== $m"
     timeout -k 5 300 python3 -m moegen bench --model $m --out generated/_exp/expert_progress \
       --compare base=generated/_exp/widen_issue/base/$m/sm90 --tokens 1,2,4,8,16,32,64 \
       --rounds 4 --json $D/policy_rev_$m.json 2>&1 | tail -16
   done > $D/F2.txt 2>&1; tail -40 $D/F2.txt ;;
GP) (timeout -k 5 300 python3 -m pytest -m gpu tests/test_gpu_layer.py -k "deepseek-v4-flash or gpt-oss-120b" -q -p no:cacheprovider
     MOEGEN_GEMM2_WAIT=expert timeout -k 5 300 python3 -m pytest -m gpu tests/test_gpu_layer.py \
       -k "deepseek-v4-flash or gpt-oss-120b" -q -p no:cacheprovider) > $D/GP.txt 2>&1
   grep -E "passed|failed|error|seed" $D/GP.txt | tail -8 ;;
K) bash lab/experiments/run_gemm_skip_waits.sh run > $D/K.txt 2>&1; tail -60 $D/K.txt ;;
G8) timeout -k 5 400 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider > $D/G8.txt 2>&1
   tail -5 $D/G8.txt ;;
G) timeout -k 5 400 python3 -m pytest -m gpu tests/test_gpu_layer.py -k "${GPU_VARIANTS:?}" -q -p no:cacheprovider > $D/G.txt 2>&1
   tail -5 $D/G.txt ;;
*) echo "unknown part $part" ;;
esac
done
