#!/usr/bin/env bash
# Narrower wgmma widths for an expert's partial last N tile: kNStep = BN / 8 (up to 8 mainloop
# instantiations) instead of BN / 4.  At T = 4096 DeepSeek-V4-Flash's experts hold ~96 +- 10 token rows,
# so with BN = 128 about half of them run the 128-wide wgmma for ~100 rows (step 32: ~16 % more MMA
# work than rows; step 16: ~8 %).  From T = 4096 the BF16 GEMMs are bound by the tensor cores.
# Ran 2026-12-03 (round h, parts N and N2): only the n256 tiles gained (gpt-oss-120b T = 4096, -2.3 %), kept in
# 2bbf76e for 256-wide BF16 tiles; docs/benchmarks.md, "Narrower widths for an expert's last tile".
#   lab/experiments/run_nstep8.sh build    (here; PYTHON=/abs/path/python)
#   lab/experiments/run_nstep8.sh run|run_reversed      (the GPU machine, after source lab/device_env.sh)
set -uo pipefail
cd "$(dirname "$0")/../.."
EXP=generated/_exp/nstep
# The shipped tables' picks from T = 1024 (gpt-oss-120b's m128n256: widths 64 apart become 32).
declare -A KERNELS=(
  [deepseek-v4-flash]=moegen_sm90_gemm1_m256n128k64s8,moegen_sm90_gemm2_m256n128k64s6,moegen_sm90_gemm1_m128n64k64s6,moegen_sm90_gemm2_m128n64k64s6
  [gpt-oss-120b]=moegen_sm90_gemm1_m128n256k64s6,moegen_sm90_gemm2_m128n256k64s6,moegen_sm90_gemm2_m128n256k64s4,moegen_sm90_gemm1_m128n64k64s8,moegen_sm90_gemm2_m128n64k64s8
)
MODELS=${MODELS:-"deepseek-v4-flash gpt-oss-120b"}
case ${1:-} in
build)
  for variant in base step8; do
    tree=$(mktemp -d) && git archive HEAD moegen templates configs pyproject.toml | tar x -C "$tree" || exit 1
    if [ $variant = step8 ]; then
      sed -i 's|static constexpr int kNStep = BN / 4 > 8 ? BN / 4 : 8;|static constexpr int kNStep = BN / 8 > 8 ? BN / 8 : 8;|' \
        "$tree/templates/include/moegen/sm90/grouped_gemm.cuh"
      grep -q 'kNStep = BN / 8' "$tree/templates/include/moegen/sm90/grouped_gemm.cuh" || { echo "patch failed"; exit 1; }
    fi
    for m in $MODELS; do
      (cd "$tree" && ${PYTHON:-python3} -m moegen build --model $m --arch sm90 --kernels ${KERNELS[$m]} \
         --out "$OLDPWD/$EXP/$variant" --objects "$OLDPWD/generated/.objects" -j 2) | tail -1
    done
  done ;;
run)
  for m in $MODELS; do
    echo "== $m"
    timeout -k 5 200 python3 lab/bitwise_ab.py $EXP/base/$m/sm90 $EXP/step8/$m/sm90 $m --tokens 97,300,1030,4100 2>&1 | tail -2
    timeout -k 5 300 python3 -m moegen bench --model $m --out $EXP/base --compare step8=$EXP/step8/$m/sm90 \
      --tokens 1024,4096,16384 --rounds 4 --json ${DEVICE_OUT:-/tmp}/nstep_$m.json 2>&1 | tail -8
  done
  ;;
run_reversed)  # the same bench, step8 listed first
  for m in $MODELS; do
    echo "== $m"
    timeout -k 5 300 python3 -m moegen bench --model $m --out $EXP/step8 --compare base=$EXP/base/$m/sm90 \
      --tokens 1024,4096,16384 --rounds 4 --json ${DEVICE_OUT:-/tmp}/nstep_rev_$m.json 2>&1 | tail -8
  done ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
