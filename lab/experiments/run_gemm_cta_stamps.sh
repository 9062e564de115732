#!/usr/bin/env bash
# Per-CTA timelines of the decode GEMMs (gemm_cta_stamps.patch, lab/gemm_cta_stamps.py): when each CTA
# enters, when its first and last K tiles land and when it ends, to split T = 1-256's GEMM time into
# ramp, steady streaming and tail.
#   lab/experiments/run_gemm_cta_stamps.sh build    (here; PYTHON=/abs/path/python)
#   lab/experiments/run_gemm_cta_stamps.sh run      (the GPU machine, after source lab/device_env.sh)
set -uo pipefail
cd "$(dirname "$0")/../.."
EXP=generated/_exp/ctastamps
declare -A KERNELS=(  # the shipped tables' picks at T = 1-256
  [deepseek-v4-flash]=moegen_sm90_gemm1_m64n8k128s8,moegen_sm90_gemm1_m64n8k128s4,moegen_sm90_gemm1_m64n16k128s4,moegen_sm90_gemm2_m64n32k128s4,moegen_sm90_gemm2_m64n8k128s4,moegen_sm90_gemm2_m128n32k64s6
  [gpt-oss-120b]=moegen_sm90_gemm1_m64n8k128s4,moegen_sm90_gemm2_m64n16k128s8,moegen_sm90_gemm2_m64n8k128s4
)
case ${1:-} in
build)
  tree=$(mktemp -d) && git archive HEAD moegen templates configs pyproject.toml | tar x -C "$tree" &&
    (cd "$tree" && patch -p1 -s < "$OLDPWD/lab/experiments/gemm_cta_stamps.patch") || exit 1
  for m in deepseek-v4-flash gpt-oss-120b; do
    (cd "$tree" && ${PYTHON:-python3} -m moegen build --model $m --arch sm90 --kernels ${KERNELS[$m]} \
       --out "$OLDPWD/$EXP" --objects "$OLDPWD/generated/.objects" -j 2) | tail -1
  done ;;
run)
  python3 lab/gemm_cta_stamps.py $EXP/deepseek-v4-flash/sm90 1,4,16,256 \
    "1=m64n8k128s8+m64n32k128s4,4=m64n8k128s4+m64n8k128s4,16=m64n8k128s4+m64n8k128s4,256=m64n16k128s4+m128n32k64s6"
  python3 lab/gemm_cta_stamps.py $EXP/gpt-oss-120b/sm90 1,4 "1=m64n8k128s4+m64n16k128s8,4=m64n8k128s4+m64n8k128s4"
  # the same libraries' spans without stamps' perturbation are in tools/timeline.py (stamps cost a
  # store per CTA and two compares per K tile)
  python3 tools/timeline.py deepseek-v4-flash 1,4 $EXP/deepseek-v4-flash/sm90 "1=m64n8k128s8+m64n32k128s4,4=m64n8k128s4+m64n8k128s4" 2>&1 | grep -A4 "^T=" ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
