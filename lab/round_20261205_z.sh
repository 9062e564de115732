#!/usr/bin/env bash
# Round z (2026-12-05): is gpt-oss-120b's 2-5 % at T = 16-1024 (round y's bench at d1ac53b against the
# 2026-12-03 A/B runs) a regression?  ddedff4 (its table and 6345d56's kernels, those runs' "new" side)
# against HEAD, each version's own moegen, table and build, under lab/ab_versions.py's one harness,
# in the order new, old, old, new.  Then a mutation of the SM100 stand-in test's subject: fill_group_args
# points every group at expert 0's token scales; tests/test_sm100_glue_gpu.py must fail.
# Stage: moegen build --model gpt-oss-120b --arch sm90 --out generated/_bench (HEAD), and from a
# worktree of ddedff4: PYTHONPATH=WORKTREE python3 -m moegen build --model gpt-oss-120b --arch sm90
# --out generated/_old; then bash lab/stage_carry.sh generated/_bench generated/_old and
# git archive -o .carry/old.tar ddedff4.
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
mkdir -p /tmp/oldsrc && tar xf .carry/old.tar -C /tmp/oldsrc || exit 1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > $D/gpu.txt
rc=0
run() {  # run LABEL CHECKOUT BUILD
  PYTHONPATH=$2:/tmp/moegen-site timeout -k 5 130 python3 lab/ab_versions.py $3 gpt-oss-120b $D/$1.json \
    > $D/$1.txt 2>&1 || rc=1
  echo "== $1"; cat $D/$1.txt | cut -c1-110
}
run new1 $PWD generated/_bench/gpt-oss-120b/sm90
run old1 /tmp/oldsrc generated/_old/gpt-oss-120b/sm90
run old2 /tmp/oldsrc generated/_old/gpt-oss-120b/sm90
run new2 $PWD generated/_bench/gpt-oss-120b/sm90
h=templates/include/moegen/sm100/grouped_gemm.cuh
cp $h /tmp/grouped_gemm.cuh.orig
sed -i 's/long(a.token_sf_rows\[g\])/long(a.token_sf_rows[0])/' $h
echo "== mutation: $(grep -c 'token_sf_rows\[0\]' $h) line(s) changed; the test must fail"
(timeout -k 5 200 python3 -m pytest -m gpu tests/test_sm100_glue_gpu.py -q -s -p no:cacheprovider 2>&1) > $D/mutation.txt
grep -E "^FAIL|passed|failed|least-squares|worst" $D/mutation.txt | cut -c1-160 | head -n 12
cp /tmp/grouped_gemm.cuh.orig $h
exit $rc
