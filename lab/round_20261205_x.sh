#!/usr/bin/env bash
# Round x (staged 2026-12-05 in a session without a device): the multi-GPU serving path, never yet run
# on two GPUs.  Needs the `nvidia-h200-x2` machine.
#   D2  tests/test_distributed_gpu.py (EP 2 and TP 2 of Qwen3-30B-A3B against one GPU, both exchange
#       modes, T = 0-4096, CUDA-graph capture), then tools/bench_distributed.py at EP 2 (both modes
#       against one GPU: which mode wins at which T, and the share of communication)
# Stage: python3 lab/build_distributed_libs.py && bash lab/stage_carry.sh generated/_gputest generated/_exp/mid
# (the object store lives under _exp/mid: the libraries relink there whenever the generator's source changed)
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
rc=0
for part in "$@"; do
  case $part in
  D2)
    ln -sfn _exp/mid/.objects generated/.objects
    nvidia-smi --query-gpu=index,name,clocks.sm,power.draw --format=csv > $D/gpus.txt
    (timeout -k 5 300 python3 -m pytest -m gpu2 tests/test_distributed_gpu.py -q -s -p no:cacheprovider 2>&1) \
      > $D/dist_gpu.txt || rc=1
    tail -3 $D/dist_gpu.txt
    timeout -k 5 200 torchrun --nproc-per-node 2 tools/bench_distributed.py qwen3-30b-a3b \
      1,16,256,1024,4096,16384 $D/bench_distributed.json generated/_gputest > $D/bench_distributed.txt 2>&1 || rc=1
    tail -9 $D/bench_distributed.txt ;;
  *) echo "unknown part $part"; rc=1 ;;
  esac
done
exit $rc
