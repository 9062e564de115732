#!/usr/bin/env bash
# Round e (2026-12-02): W4A8 tables for gpt-oss-120b and gpt-oss-20b (the GEMM shapes they share).
# Built here before the call, at 073988d: `moegen build --model gpt-oss-120b --activations fp8
# --kernels shortlist` (and gpt-oss-20b), and gpt-oss-120b's default BF16 build.  Carried: those
# builds' manifests and libraries and the objects their manifests name (from generated/.objects, so
# the default W4A8 builds there only link), packed into .carry/generated.tar.xz as stage_carry.sh does.
# After `source lab/device_env.sh`:
#   A: tune both on the shortlist (the DeepSeek-V4-Flash W4A8 table's settings), writing the tables
#      into configs/dispatch (copies in $OUT); build the default W4A8 libraries from them (links
#      only); `moegen check` both; bench gpt-oss-120b W4A16 against W4A8, one run in each order.
# Results in $OUT/results.tgz.     bash lab/round_20261202_e.sh OUT A
set -uo pipefail
OUT=$1
R=/tmp/round_e; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R . ; }
if [ "$2" = A ]; then
  for m in gpt-oss-120b gpt-oss-20b; do
    timeout -k 5 200 python3 -m moegen tune --model $m --activations fp8 --kernels shortlist --no-build \
      --buckets 1,4,16,64,256,1024,4096,16384 --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 \
      --table-root configs/dispatch > $R/tune-$m.log 2>&1
    echo "tune $m rc $?"; tail -3 $R/tune-$m.log
    cp configs/dispatch/sm90/nvidia-h200-132sm/*fp8.json $R/ 2>/dev/null
    pack
  done
  for m in gpt-oss-120b gpt-oss-20b; do
    timeout -k 5 120 python3 -m moegen build --model $m --activations fp8 -j 16 > $R/build-$m.log 2>&1
    timeout -k 5 150 python3 -m moegen check --model $m --activations fp8 --tokens 0,1,3,16,64,300,1024,4100 \
      > $R/check-$m.txt 2>&1; echo "check $m rc $?"; tail -1 $R/check-$m.txt
    pack
  done
  for o in a b; do
    if [ $o = a ]; then A=""; C="w4a8=generated/gpt-oss-120b-w4a8/sm90"; else A="--activations fp8"; C="w4a16=generated/gpt-oss-120b/sm90"; fi
    echo "== default $A"
    timeout -k 5 200 python3 -m moegen bench --model gpt-oss-120b $A --compare $C \
      --tokens 1,4,16,64,256,1024,4096,16384 --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-oss-$o.json \
      2>/dev/null | cut -d'|' -f2-6
    pack
  done
fi
