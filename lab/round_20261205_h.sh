#!/usr/bin/env bash
# Round h (2026-12-05, a tenth session, H100): H100 users get the H200's table with a warning.  Tune
# the default model's table on the H100 (the mid library: shortlist plus the shipped picks, built here
# with lab/mid_kernels.py), then bench it against the H200 table the runtime falls back to, on the same
# library, both orders.  Staged with
#   bash lab/stage_carry.sh generated/_exp/mid/deepseek-v4-flash generated/_exp/mid/gpt-oss-120b
# A call on a fresh machine unpacks .carry/round_h.tgz (the previous call's $OUT/round_h.tgz) first.
#   TUNE MODEL    tune the buckets into /tmp/round_h/dispatch
#   BENCH MODEL   the H100 table (a user table) against the H200 table (the fallback), both orders
set -uo pipefail
source lab/device_env.sh || exit 1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,temperature.gpu,driver_version --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 || { echo "not an H100"; exit 3; }
D=${OUT:-/tmp}; R=/tmp/round_h; mkdir -p $R
[ -d $R/dispatch ] || [ ! -f .carry/round_h.tgz ] || tar xzf .carry/round_h.tgz -C $R
LIB=generated/_exp/mid; M=$2; T=${TOKENS:-1,4,16,64,128,256,1024,4096,16384}
rc=0
case $1 in
TUNE)
  timeout -k 5 ${TUNE_LIMIT:-400} python3 -m moegen tune --model $M --no-build --out $LIB --buckets $T \
    --table-root $R/dispatch --warm-seconds 0.5 --min-seconds 0.03 --reps 3 --rotations 2 > $R/tune-$M.txt 2>&1 || rc=1
  echo "tune rc $rc"; grep -E "T=|timings" $R/tune-$M.txt | cut -c1-140 ;;
BENCH)
  for side in h100 h200; do rm -rf $R/$side/$M && mkdir -p $R/$side/$M && cp -r $LIB/$M/sm90 $R/$side/$M/; done
  rm -rf $R/h100/dispatch && cp -r $R/dispatch $R/h100/dispatch
  for o in a b; do
    if [ $o = a ]; then DD=$R/h100; C=h200table=$R/h200/$M/sm90; else DD=$R/h200; C=h100table=$R/h100/$M/sm90; fi
    timeout -k 5 ${BENCH_LIMIT:-200} python3 -m moegen bench --model $M --out $DD --compare $C --tokens $T \
      --rounds 4 --json $R/bench-$M-$o.json > $R/bench-$M-$o.txt 2>&1 || rc=1
    echo "bench $o rc $?"; grep -E " T=|clock|power" $R/bench-$M-$o.txt | cut -c1-160
  done ;;
esac
tar czf $D/round_h.tgz -C $R . 2>/dev/null
exit $rc
