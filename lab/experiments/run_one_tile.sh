# Device A/B: every kernel one tile per CTA (kPersistent = false, so the s4/s8 kernels lose the tile
# loop and, per ptxas, their wgmma serialization) against the carried, tuned library. $1 = results dir.
set -uo pipefail
O=$1; mkdir -p $O
source tools/device_env.sh || exit 1
M=deepseek-v4-flash
sed 's/static constexpr bool kPersistent = kKTiles % Stages == 0;/static constexpr bool kPersistent = false;/' \
  templates/include/moegen/sm90_mxfp4_grouped_gemm.cuh > /tmp/one_tile.cuh
grep -c "kPersistent = false" /tmp/one_tile.cuh
timeout 200 python3 tools/ablation.py $O/ab --header /tmp/one_tile.cuh --variants base --tokens 64,256,1024,4096 \
  --pick 64:m64n16k128s4,m64n8k128s6 --pick 256:m128n32k64s8,m128n32k64s8 --pick 1024:m128n64k64s8,m128n64k64s8 \
  --pick 4096:m256n128k64s8,m256n128k64s8 --work /tmp/abN > $O/ab.log 2>&1; echo "ablation rc $?"
grep -h "built" $O/ab.log
N=/tmp/abN/base/generated/$M/sm90; T=generated/$M/sm90
for r in 1 2; do
  for tag in tree one_tile; do
    lib=$T; [ $tag = one_tile ] && lib=$N
    f=$O/timeline_${r}_$tag.txt
    timeout 60 python3 tools/timeline.py $M 64,256,1024,4096 $lib > $f 2>&1
    echo "$tag: $(grep -o 'T=[0-9]* \|span median [0-9.]*' $f | tr '\n' ' ')" | tee -a $O/summary.txt
  done
done
timeout 90 python3 tools/check_kernels.py $N s8 3,300,2000 2>&1 | tail -10 | tee -a $O/summary.txt
grep -h "C751\|Used" /tmp/abN/base/generated/$M/sm90/logs/*.log | cut -c1-120 | sort | uniq -c | tee -a $O/summary.txt
