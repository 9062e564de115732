# Device run for cluster_token_pairs.patch: builds (pair header, tree header), A/B timeline
# (tree, pair, tree), correctness, racecheck. $1 = results dir. H200 results: docs/benchmarks.md,
# 1f3e3ad's section.
set -uo pipefail
O=$1; mkdir -p $O
source tools/device_env.sh || exit 1
M=deepseek-v4-flash
patch -o /tmp/pair.cuh templates/include/moegen/sm90_mxfp4_grouped_gemm.cuh tools/experiments/cluster_token_pairs.patch
PICKS="--pick 256:m128n64k64s6,m128n64k64s6 --pick 1024:m128n64k64s6,m128n64k64s6 --pick 4096:m128n256k64s6,m128n256k64s6"
TOK=256,1024,4096
timeout 300 python3 tools/ablation.py $O/pair --header /tmp/pair.cuh --variants base,stream --tokens $TOK $PICKS --work /tmp/abP > $O/pair.log 2>&1; echo "pair rc $?"
timeout 300 python3 tools/ablation.py $O/tree --variants base,stream --tokens $TOK $PICKS --work /tmp/abT > $O/tree.log 2>&1; echo "tree rc $?"
grep -h "built\|==\|gemm\|span\|layer" $O/pair.log | head -40
grep -h "built\|==\|gemm\|span\|layer" $O/tree.log | head -40
P=/tmp/abP/base/generated/$M/sm90; T=/tmp/abT/base/generated/$M/sm90
for r in 1 2; do
  echo "== again pair $r"; timeout 60 python3 tools/timeline.py $M $TOK $P 2>&1 | tail -12
  echo "== again tree $r"; timeout 60 python3 tools/timeline.py $M $TOK $T 2>&1 | tail -12
done
echo "== check pair"; MOEGEN_GRID=tiles timeout 120 python3 tools/check_kernels.py $P m128 3,300,2000 2>&1 | tail -8
echo "== racecheck pair"; MOEGEN_PROFILE_KERNELS=moegen_sm90_gemm1_m128n64k64s6,moegen_sm90_gemm2_m128n64k64s6 \
  timeout 200 compute-sanitizer --tool racecheck python3 tools/profile_run.py $M 300 $P 2>&1 | tail -6
echo "== memcheck pair"; MOEGEN_PROFILE_KERNELS=moegen_sm90_gemm1_m128n256k64s6,moegen_sm90_gemm2_m128n256k64s6 \
  timeout 100 compute-sanitizer --tool memcheck python3 tools/profile_run.py $M 2000 $P 2>&1 | tail -4
cuobjdump -sass $P/libmoegen-*.so | grep -c UBLKCP
