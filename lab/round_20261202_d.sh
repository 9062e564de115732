#!/usr/bin/env bash
# Round d (2026-12-02).  Builds made here before the call:
#   generated/deepseek-v4-flash: dfb11d7's default build; generated/_gputest: the W4A8 test libraries.
#   generated/_exp/pf: dfb11d7 + lab/experiments/l2_prefetch_next_gemm.patch (GEMM1's CTAs prefetch
#   their expert's GEMM2 weights into L2, a slice per weight-row tile, for the first
#   MOEGEN_PREFETCH_MB of GEMM2 work; MOEGEN_STREAM_POLICY bit 0: GEMM1's weight stream evict_first,
#   bit 1: the prefetch evict_last; MOEGEN_PREFETCH_AHEAD=D: each GEMM prefetches its own weights D
#   K tiles ahead of its ring).
# After `source lab/device_env.sh`:
#   A: the W4A8 GPU tests and the quantizer test (dfb11d7), then the decode timeline and bench of
#      the prefetch variants against the default build.
#   B: generated/_exp/ln: dfb11d7 + lab/experiments/gather_full_lines.patch (the producer gathers
#      token rows 8 lanes per row, four whole 128-byte lines per warp cp.async, instead of 4 lanes
#      per row): `moegen check`, then bench against the default build in both orders.
#   C: generated/_exp/lat: dfb11d7 + lab/experiments/schedule_one_round_trip.patch (a GEMM CTA loads
#      its first work tile's entries beside the tile count: one L2 round trip before its first
#      weights, not two): `moegen check`, the decode timeline, bench in both orders.
#   D: generated/_exp/w1, w2: dfb11d7 + lab/experiments/mbar_wait_no_suspend_hint.patch (w1: the
#      mbarrier try_wait without its suspend-time hint) or mbar_wait_test_spin.patch (w2: test_wait
#      spinning): bench against the default build in two orders; then W4A16 against W4A8 at dfb11d7
#      (the default builds), one run in each order; the W4A8 GPU tests (T <= 2 pooled over 4 draws).
#   E: generated/_exp/nt: dfb11d7 + lab/experiments/ablation_no_token_rows.patch (the producers copy
#      no token rows: garbage results, only times count): the timeline at T = 256-16384 against the
#      default build, twice each.
# Results in $OUT/results.tgz.     bash lab/round_20261202_d.sh OUT A|B|C|D|E
set -uo pipefail
OUT=$1
R=/tmp/round_d; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R .; }
DEF=generated/deepseek-v4-flash/sm90
PF=generated/_exp/pf/deepseek-v4-flash/sm90
if [ "$2" = A ]; then
  timeout -k 5 150 python3 -m pytest -m gpu tests/test_gpu_w4a8.py tests/test_quantize_gpu.py -q -s -p no:cacheprovider \
    > $R/pytest-w4a8.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8.log | tail -8
  grep -E "rel L2" $R/pytest-w4a8.log > $R/w4a8-errors.txt
  pack
  for v in "def:::" "pf0:0:0:0" "pf1:32:1:0" "pf3:32:3:0" "a4:0:0:4" "a8:0:0:8" "a16:0:0:16" "a8pf3:32:3:8" "a8s1:0:1:8"; do
    IFS=: read name mb pol ahead <<< "$v"; lib=$PF; [ $name = def ] && lib=$DEF
    echo "== $name"
    MOEGEN_PREFETCH_MB=$mb MOEGEN_STREAM_POLICY=$pol MOEGEN_PREFETCH_AHEAD=$ahead timeout -k 5 60 \
      python3 tools/timeline.py deepseek-v4-flash 1,2,4,8 $lib 2>&1 | grep -v -i warn
  done > $R/timeline.txt
  cat $R/timeline.txt; pack
  for v in "a8:0:0:8" "pf3:32:3:0" "a8pf3:32:3:8"; do
    IFS=: read name mb pol ahead <<< "$v"
    echo "== $name"
    MOEGEN_PREFETCH_MB=$mb MOEGEN_STREAM_POLICY=$pol MOEGEN_PREFETCH_AHEAD=$ahead timeout -k 5 150 python3 -m moegen bench \
      --model deepseek-v4-flash --compare $name=$PF --tokens 1,2,4,8,16,64 --reps 6 --rounds 2 --warm-seconds 2 \
      --json $R/bench-$name.json 2>/dev/null | cut -d'|' -f2-6
    pack
  done
fi
if [ "$2" = B ]; then
  X=generated/_exp/ln
  timeout -k 5 150 python3 -m moegen check --model deepseek-v4-flash --out $X --tokens 0,1,7,33,300,2048,4100 \
    > $R/check-ln.txt 2>&1; echo "check rc $?"; tail -3 $R/check-ln.txt
  pack
  for o in a b; do
    if [ $o = a ]; then D=generated; C=$X/deepseek-v4-flash/sm90; L=ln; else D=$X; C=$DEF; L=def; fi
    echo "== default from $D, compare $L"
    timeout -k 5 200 python3 -m moegen bench --model deepseek-v4-flash --out $D --compare $L=$C \
      --tokens ${TOKENS:-1,16,256,1024,4096,16384} --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-ln-$o.json \
      2>/dev/null | cut -d'|' -f2-6
    pack
  done
fi
if [ "$2" = C ]; then
  X=generated/_exp/lat
  timeout -k 5 150 python3 -m moegen check --model deepseek-v4-flash --out $X --tokens 0,1,7,33,300,2048 \
    > $R/check-lat.txt 2>&1; echo "check rc $?"; tail -1 $R/check-lat.txt
  pack
  for lib in $DEF $X/deepseek-v4-flash/sm90 $DEF $X/deepseek-v4-flash/sm90; do
    echo "== $lib"; timeout -k 5 60 python3 tools/timeline.py deepseek-v4-flash 1,2,4 $lib 2>&1 | grep -v -i warn
  done > $R/timeline-lat.txt
  cat $R/timeline-lat.txt; pack
  for o in a b; do
    if [ $o = a ]; then D=generated; C=$X/deepseek-v4-flash/sm90; L=lat; else D=$X; C=$DEF; L=def; fi
    echo "== default from $D, compare $L"
    timeout -k 5 200 python3 -m moegen bench --model deepseek-v4-flash --out $D --compare $L=$C \
      --tokens ${TOKENS:-1,2,4,16,64,1024} --reps 8 --rounds 3 --warm-seconds 2 --json $R/bench-lat-$o.json \
      2>/dev/null | cut -d'|' -f2-6
    pack
  done
fi
if [ "$2" = D ]; then
  timeout -k 5 150 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider > $R/pytest-w4a8-d.log 2>&1
  grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8-d.log | tail -4
  grep -E "rel L2" $R/pytest-w4a8-d.log > $R/w4a8-errors-d.txt
  pack
  W1=generated/_exp/w1/deepseek-v4-flash/sm90; W2=generated/_exp/w2/deepseek-v4-flash/sm90
  for o in a b; do
    if [ $o = a ]; then D=generated; C="--compare w1=$W1 --compare w2=$W2"; else D=generated/_exp/w2; C="--compare w1=$W1 --compare def=$DEF"; fi
    echo "== default from $D"
    timeout -k 5 200 python3 -m moegen bench --model deepseek-v4-flash --out $D $C --tokens 1,4,16,64,256 \
      --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-w-$o.json 2>/dev/null | cut -d'|' -f2-6
    pack
  done
  for o in a b; do
    if [ $o = a ]; then A=""; C="w4a8=generated/deepseek-v4-flash-w4a8/sm90"; else A="--activations fp8"; C="w4a16=$DEF"; fi
    echo "== default $A"
    timeout -k 5 280 python3 -m moegen bench --model deepseek-v4-flash $A --compare $C \
      --tokens 1,4,16,32,64,256,1024,4096,16384 --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-mode-$o.json \
      2>/dev/null | cut -d'|' -f2-6
    pack
  done
fi
if [ "$2" = E ]; then
  NT=generated/_exp/nt/deepseek-v4-flash/sm90
  for lib in $DEF $NT $DEF $NT; do
    echo "== $lib"; timeout -k 5 90 python3 tools/timeline.py deepseek-v4-flash 256,1024,4096,16384 $lib 2>&1 | grep -v -i warn
  done > $R/timeline-nt.txt
  cat $R/timeline-nt.txt; pack
fi
