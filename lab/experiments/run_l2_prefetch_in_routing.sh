#!/usr/bin/env bash
# The routing kernel prefetching the chosen experts' first GEMM1 K atoms into L2 while HBM idles
# (l2_prefetch_in_routing.patch; prepared 2026-12-03 at 5711005, built and SASS-checked here: UBLKPF in
# route_one_block_kernel, no spills; not yet run on a GPU).  At T = 1 HBM idles from top-k's end to
# GEMM1's first weight copy, about 3 us (docs/benchmarks.md, "Decode: the routing kernel in front of
# GEMM1"); a routing kernel that cost nothing bounds the gain at 2.8 us on DeepSeek-V4-Flash.
# Ran 2026-12-03 (round h, part L): not kept.  One block prefetches at ~0.2 TB/s and the kernel ends after
# its prefetches; GEMM1 was no faster with up to 24 % of its weights in L2 (docs/benchmarks.md).
#   lab/experiments/run_l2_prefetch_in_routing.sh build    (here: patched tree, default builds; PYTHON=.venv/bin/python)
#   lab/experiments/run_l2_prefetch_in_routing.sh run      (the GPU machine, after source lab/device_env.sh)
# MOEGEN_LAB_L2_ATOMS: K atoms (64 deep, 2 KB) per 64-row slice of each chosen expert (0: off);
# MOEGEN_LAB_L2_ROWS: up to how many expert rows (tokens x top_k) the kernel prefetches (default 8).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=generated/_exp/l2pf
case ${1:-} in
build)
  tree=$(mktemp -d) && git archive HEAD moegen templates configs pyproject.toml | tar x -C "$tree" &&
    (cd "$tree" && git apply -p1 --directory=. "$OLDPWD/lab/experiments/l2_prefetch_in_routing.patch" 2>/dev/null ||
       patch -p1 -s < "$OLDPWD/lab/experiments/l2_prefetch_in_routing.patch") || exit 1
  for m in deepseek-v4-flash gpt-oss-120b; do
    (cd "$tree" && ${PYTHON:-python3} -m moegen build --model $m --arch sm90 --out "$OLDPWD/$OUT" \
       --objects "$OLDPWD/generated/.objects") | tail -1
  done ;;
run)
  for m in deepseek-v4-flash gpt-oss-120b; do
    MOEGEN_LAB_L2_ROWS=32 timeout -k 5 150 python3 lab/bitwise_switch.py $OUT/$m/sm90 $m MOEGEN_LAB_L2_ATOMS=0 \
      MOEGEN_LAB_L2_ATOMS=8 --tokens 1,2,5 2>&1 | grep -v Warn | tail -2
    for atoms in 0 4 8 16 0; do
      echo "== $m MOEGEN_LAB_L2_ATOMS=$atoms"
      MOEGEN_LAB_L2_ATOMS=$atoms python3 tools/timeline.py $m 1,2,4 $OUT/$m/sm90 2>&1 | grep -A2 "^T="
    done
  done ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
