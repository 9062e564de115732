#!/usr/bin/env bash
# What the decode GEMMs lose to their dependencies: a lab build (lab/experiments/gemm_skip_waits.patch)
# whose GEMM1 and GEMM2 may skip their pdl_waits (MOEGEN_LAB_G1_READY / MOEGEN_LAB_G2_READY set the
# kernels' schedule_ready: 1 streams weights before the wait, 2 skips it; garbage output, the previous
# replay's schedule and `h` standing in).  GEMM2 without its wait on GEMM1 bounds what overlapping
# the two GEMMs (one persistent decode kernel, or per-expert flags) could win with the same kernels.
#   lab/experiments/run_gemm_skip_waits.sh build   (here; PYTHON=/abs/path/python)
#   lab/experiments/run_gemm_skip_waits.sh run     (the GPU machine, after source lab/device_env.sh)
set -uo pipefail
cd "$(dirname "$0")/../.."
EXP=generated/_exp/skip_waits
declare -A KERNELS=(
  [deepseek-v4-flash]=moegen_sm90_gemm1_m64n8k128s8,moegen_sm90_gemm1_m64n8k128s4,moegen_sm90_gemm2_m64n32k128s4,moegen_sm90_gemm2_m64n8k128s4
  [gpt-oss-120b]=moegen_sm90_gemm1_m64n8k128s4,moegen_sm90_gemm2_m64n16k128s8,moegen_sm90_gemm2_m64n8k128s4
)
# T=picks for tools/timeline.py: the shipped tables' decode picks.
declare -A PICKS=(
  [deepseek-v4-flash]="1=m64n8k128s8+m64n32k128s4,4=m64n8k128s4+m64n8k128s4"
  [gpt-oss-120b]="1=m64n8k128s4+m64n16k128s8,4=m64n8k128s4+m64n8k128s4"
)
case ${1:-} in
build)
  tree=$(mktemp -d) && git archive HEAD moegen templates configs pyproject.toml tools | tar x -C "$tree" || exit 1
  (cd "$tree" && patch -p1 -s < "$OLDPWD/lab/experiments/gemm_skip_waits.patch") || { echo "patch failed"; exit 1; }
  for m in deepseek-v4-flash gpt-oss-120b; do
    (cd "$tree" && ${PYTHON:-python3} -m moegen build --model $m --arch sm90 --kernels ${KERNELS[$m]} \
       --out "$OLDPWD/$EXP" --objects "$OLDPWD/generated/.objects" -j 2) | tail -1
  done ;;
run)
  for m in deepseek-v4-flash gpt-oss-120b; do
    for mode in "0 1" "1 1" "0 2" "1 2" "2 2"; do
      set -- $mode
      echo "=== $m MOEGEN_LAB_G1_READY=$1 MOEGEN_LAB_G2_READY=$2"
      MOEGEN_LAB_G1_READY=$1 MOEGEN_LAB_G2_READY=$2 timeout -k 5 120 python3 tools/timeline.py $m 1,4 $EXP/$m/sm90 "${PICKS[$m]}" 2>&1 | grep -v Warn | tail -14
    done
  done ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
