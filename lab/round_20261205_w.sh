#!/usr/bin/env bash
# Round w (staged 2026-12-04 in a session without a device): this session's CPU-side changes on the GPU,
# then round v (still unrun).
#   C   `moegen check` under the BF16 bound of check and the tuner (5e-3; 1e-2 before 1fe44a0, 2.7e-3 until ee8caad)
#       on two BF16 builds of the test tree, a short tune of two buckets (the profiler's context probe
#       after a failing candidate never fires on a healthy GPU; the tune must finish), and the GPU
#       layer tests of one BF16 variant (their libraries relink: the generator's source changed)
#   V   round v: W4A8 batch invariance on every variant, the timing tests, the two overridden buckets
#   P   (added 2026-12-05) a padded TP split: `moegen check` of gpt-oss-120b --tp 4 (736 intermediate
#       columns per rank, GEMM2's K padded to whole tiles; built with `moegen build --model gpt-oss-120b
#       --tp 4 --arch sm90 --out generated/_gputest --objects generated/.objects`)
#   Q   (added 2026-12-05) the arch-neutral quantizer tests, now with the SM100 scale rows' prefix sum at 48
#       and 256 experts (tests/test_quantize_gpu.py; compiles its harness there), and the checkpoint loader
#       quantizing float experts on the GPU to the CPU's bits (tests/test_checkpoint.py)
# Stage: bash lab/stage_carry.sh generated/_gputest generated/_exp/mid
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
rc=0
for part in "$@"; do
  case $part in
  C)
    ln -sfn _exp/mid/.objects generated/.objects
    for split in "gpt-oss-120b --tp 2" "qwen3-30b-a3b --ep-size 4 --ep-rank 1"; do
      read -r model rest <<< "$split"
      timeout -k 5 150 python3 -m moegen check --model $model $rest --out generated/_gputest --tokens 0,1,5,300,1030 \
        > $D/check-$model.txt 2>&1 || rc=1
      tail -2 $D/check-$model.txt
    done
    timeout -k 5 150 python3 -m moegen tune --model gpt-oss-20b --tp 2 --out generated/_exp/mid --no-build \
      --buckets 1,256 --table-root /tmp/round_w_tables > $D/tune-w.txt 2>&1 || rc=1
    tail -3 $D/tune-w.txt
    (MOEGEN_TEST_KERNELS=default timeout -k 5 200 python3 -m pytest -m gpu tests/test_gpu_layer.py -q \
       -p no:cacheprovider -k "gpt-oss-120b-tp2" 2>&1) > $D/GL.txt || rc=1
    tail -2 $D/GL.txt ;;
  V)
    OUT=$D bash lab/round_20261204_v.sh G R || rc=1 ;;
  P)
    ln -sfn _exp/mid/.objects generated/.objects
    timeout -k 5 200 python3 -m moegen check --model gpt-oss-120b --tp 4 --out generated/_gputest \
      --tokens 0,1,5,300,1030,4100 > $D/check-tp4.txt 2>&1 || rc=1
    tail -2 $D/check-tp4.txt ;;
  Q)
    (timeout -k 5 200 python3 -m pytest -m gpu tests/test_quantize_gpu.py tests/test_checkpoint.py -q -p no:cacheprovider 2>&1) \
      > $D/quantize.txt || rc=1
    tail -2 $D/quantize.txt ;;
  *) echo "unknown part $part"; rc=1 ;;
  esac
done
exit $rc
