#!/usr/bin/env bash
# BF16 consumers issuing each k16 block's wgmmas as soon as that block's A registers are widened
# (lab/experiments/widen_and_issue.patch), instead of widening the whole consumer step first: the
# tensor cores would start one word after a slot lands.  The same wgmmas in the same order (same bits).
# The ablations put 13-24 % of T = 4-16384 on the widening and wgmmas not hidden behind the copies.
#   lab/experiments/run_widen_and_issue.sh build     (here; PYTHON=/abs/path/python)
#   lab/experiments/run_widen_and_issue.sh run|run_reversed   (the GPU machine, after source lab/device_env.sh)
# TOKENS and MODELS narrow the bench.
set -uo pipefail
cd "$(dirname "$0")/../.."
EXP=generated/_exp/widen_issue
MODELS=${MODELS:-"deepseek-v4-flash gpt-oss-120b"}
TOKENS=${TOKENS:-1,4,64,256,1024,4096,16384}
case ${1:-} in
build)
  for variant in base interleaved; do
    tree=$(mktemp -d) && git archive HEAD moegen templates configs pyproject.toml | tar x -C "$tree" || exit 1
    if [ $variant = interleaved ]; then
      (cd "$tree" && patch -p1 -s < "$OLDPWD/lab/experiments/widen_and_issue.patch") || { echo "patch failed"; exit 1; }
    fi
    for m in $MODELS; do
      (cd "$tree" && ${PYTHON:-python3} -m moegen build --model $m --arch sm90 \
         --out "$OLDPWD/$EXP/$variant" --objects "$OLDPWD/generated/.objects" -j 2) | tail -1
    done
  done ;;
bitwise)
  for m in $MODELS; do
    echo "== $m"
    timeout -k 5 200 python3 lab/bitwise_ab.py $EXP/base/$m/sm90 $EXP/interleaved/$m/sm90 $m --tokens 1,5,97,300,1030,4100 2>&1 | tail -2
  done ;;
run)
  for m in $MODELS; do
    echo "== $m"
    timeout -k 5 400 python3 -m moegen bench --model $m --out $EXP/base --compare interleaved=$EXP/interleaved/$m/sm90 \
      --tokens $TOKENS --rounds 4 --json ${DEVICE_OUT:-/tmp}/widen_issue_$m.json 2>&1 | tail -10
  done ;;
run_reversed)  # the same bench, the interleaved library listed first
  for m in $MODELS; do
    echo "== $m"
    timeout -k 5 400 python3 -m moegen bench --model $m --out $EXP/interleaved --compare base=$EXP/base/$m/sm90 \
      --tokens $TOKENS --rounds 4 --json ${DEVICE_OUT:-/tmp}/widen_issue_rev_$m.json 2>&1 | tail -10
  done ;;
*) echo "usage: $0 build|bitwise|run|run_reversed" >&2; exit 2 ;;
esac
# Ran 2026-12-03 (round i, parts W and W2): bit for bit equal; slower at decode (DeepSeek-V4-Flash T = 1
# +6.3 %, gpt-oss-120b T = 4 +4.9 %), level elsewhere. Not kept; docs/benchmarks.md, "Issuing each wgmma
# as soon as its operand is widened".
