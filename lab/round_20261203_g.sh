#!/usr/bin/env bash
# Round g (2026-12-03): the routing kernel in front of GEMM1 at decode.
#   E  how much of the chain is it: libraries from a lab tree where GemmParams::schedule_ready == 2
#      skips GEMM1's pdl_waits and MOEGEN_LAB_EARLY sets GEMM1's schedule_ready (0: as shipped; 1: the
#      weights' prologue before the wait, from whatever schedule the workspace holds; 2: no wait at
#      all).  Modes 1 and 2 compute garbage; only their times mean anything (T = 1 only: at larger T a
#      stale schedule from another graph's workspace can fault).
#   S  where its time goes: lab/routing_stamps.py on a build whose routing kernel stamps its phases.
#   R  a677013 (the block computes the scores, one warp the schedule) against ccbe5a3: default builds
#      of both (generated/_exp/route1, route0; the GEMM objects are the same): bit for bit, the
#      timeline, `moegen bench` in both orders; `moegen check` of the W4A8 build (its routing quantizes
#      in the same block up to T = 2); then the GPU tests on the tests' libraries rebuilt here.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
for part in "$@"; do
case $part in
E)
  R=generated/_exp/early
  for mode in 0 1 2 0; do
    echo "=== MOEGEN_LAB_EARLY=$mode"
    MOEGEN_LAB_EARLY=$mode python3 tools/timeline.py deepseek-v4-flash 1 $R/deepseek-v4-flash/sm90 "1=m64n8k128s8+m64n32k128s4"
    MOEGEN_LAB_EARLY=$mode python3 tools/timeline.py gpt-oss-120b 1 $R/gpt-oss-120b/sm90 "1=m64n8k128s4+m64n16k128s8"
  done ;;
S)
  R=generated/_exp/stamps
  python3 lab/routing_stamps.py $R/deepseek-v4-flash/sm90 1,2,4,8,16,32 "1=m64n8k128s8+m64n32k128s4,2=m64n8k128s4+m64n8k128s4,4=m64n8k128s4+m64n8k128s4,8=m64n8k128s4+m64n8k128s4,16=m64n8k128s4+m64n8k128s4,32=m64n8k128s4+m64n8k128s4"
  python3 lab/routing_stamps.py $R/gpt-oss-120b/sm90 1,4,16 "1=m64n8k128s4+m64n16k128s8,4=m64n8k128s4+m64n8k128s4,16=m64n8k128s4+m64n8k128s4"
  python3 tools/timeline.py deepseek-v4-flash 1,4 $R/deepseek-v4-flash/sm90 "1=m64n8k128s8+m64n32k128s4,4=m64n8k128s4+m64n8k128s4" ;;
R)
  A=generated/_exp/route0; B=generated/_exp/route1; OUTD=generated/_exp/roundg; mkdir -p $OUTD
  for m in deepseek-v4-flash gpt-oss-120b; do
    timeout -k 5 120 python3 lab/bitwise_ab.py $A/$m/sm90 $B/$m/sm90 $m --tokens 1,2,5,32,33,300 > $OUTD/bitwise-$m.txt 2>&1
    echo "bitwise $m rc $?: $(grep -c ': equal' $OUTD/bitwise-$m.txt) equal"; grep -v ': equal' $OUTD/bitwise-$m.txt | grep -v Warn | tail -3
  done
  for lib in $A $B; do
    echo "== timeline $lib"
    python3 tools/timeline.py deepseek-v4-flash 1,4,16,32 $lib/deepseek-v4-flash/sm90 2>&1 | grep -A4 "^T="
    python3 tools/timeline.py gpt-oss-120b 1,4,16 $lib/gpt-oss-120b/sm90 2>&1 | grep -A4 "^T="
  done
  for m in deepseek-v4-flash gpt-oss-120b; do
    for o in a b; do
      if [ $o = a ]; then D=$B; C=ccbe5a3=$A/$m/sm90; else D=$A; C=a677013=$B/$m/sm90; fi
      timeout -k 5 170 python3 -m moegen bench --model $m --out $D --compare $C --tokens 1,2,4,8,16,32 --rounds 4 \
        --json $OUTD/bench-$m-$o.json > $OUTD/bench-$m-$o.txt 2>&1
      echo "bench $m $o rc $?"; grep -v Warning $OUTD/bench-$m-$o.txt | tail -14 | cut -d'|' -f2-8,13
    done
  done
  timeout -k 5 150 python3 -m moegen check --model deepseek-v4-flash --activations fp8 --out $B --tokens 0,1,2,3,7,33 > $OUTD/check-w4a8.txt 2>&1
  echo "check w4a8 rc $?"; grep -iv warn $OUTD/check-w4a8.txt | tail -3 ;;
S2)
  # the stamps of ccbe5a3 (s0), a677013 (s1) and a677013 without the block's scores (s1n), default builds
  for v in s0 s1 s1n; do
    echo "=== $v"
    python3 lab/routing_stamps.py generated/_exp/stamps_$v/deepseek-v4-flash/sm90 1,4,16,32
    python3 lab/routing_stamps.py generated/_exp/stamps_$v/gpt-oss-120b/sm90 1,16
  done ;;
R2)
  # one warp's schedule up to 128 local experts, against ccbe5a3 (route0)
  A=generated/_exp/route0; B=generated/_exp/route2; OUTD=generated/_exp/roundg; mkdir -p $OUTD
  for m in gpt-oss-120b qwen3-30b-a3b; do
    timeout -k 5 100 python3 lab/bitwise_ab.py $A/$m/sm90 $B/$m/sm90 $m --tokens 1,5,32,33,300 > $OUTD/bitwise2-$m.txt 2>&1
    echo "bitwise $m rc $?: $(grep -c ': equal' $OUTD/bitwise2-$m.txt) equal"; grep -v ': equal' $OUTD/bitwise2-$m.txt | grep -v Warn | tail -3
  done
  for m in gpt-oss-120b qwen3-30b-a3b; do
    for o in a b; do
      if [ $o = a ]; then D=$B; C=ccbe5a3=$A/$m/sm90; else D=$A; C=new=$B/$m/sm90; fi
      timeout -k 5 120 python3 -m moegen bench --model $m --out $D --compare $C --tokens 1,2,4,8,16 --rounds 4 \
        --json $OUTD/bench2-$m-$o.json > $OUTD/bench2-$m-$o.txt 2>&1
      echo "bench $m $o rc $?"; grep -v Warning $OUTD/bench2-$m-$o.txt | tail -12 | cut -d'|' -f2-8,13
    done
  done ;;
R3)
  # one expert per schedule thread, only as many warps as that takes (route3) against ccbe5a3 (route0):
  # bits, the GPU tests (BF16, and W4A8 up to 128 local experts), the timeline, the bench
  A=generated/_exp/route0; B=generated/_exp/route3; OUTD=generated/_exp/roundg; mkdir -p $OUTD
  for m in deepseek-v4-flash gpt-oss-120b; do
    timeout -k 5 100 python3 lab/bitwise_ab.py $A/$m/sm90 $B/$m/sm90 $m --tokens 1,5,32,33,300 > $OUTD/bitwise3-$m.txt 2>&1
    echo "bitwise $m rc $?: $(grep -c ': equal' $OUTD/bitwise3-$m.txt) equal"; grep -v ': equal' $OUTD/bitwise3-$m.txt | grep -v Warn | tail -3
  done
  cp -n generated/_carrystore/.objects/* generated/.objects/ 2>/dev/null || { mkdir -p generated/.objects && cp generated/_carrystore/.objects/* generated/.objects/; }
  timeout -k 5 150 python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider > /tmp/gputest.txt 2>&1
  echo "gpu tests rc $?"; grep -E "seed|passed|failed|error" /tmp/gputest.txt | tail -4
  timeout -k 5 100 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider \
    -k "gpt-oss-120b-w4a8 or qwen3-30b-a3b-w4a8 or qwen3-30b-a3b-ep1of4-w4a8" > /tmp/gputest-w4a8.txt 2>&1
  echo "gpu tests w4a8 rc $?"; grep -E "seed|passed|failed|error" /tmp/gputest-w4a8.txt | tail -4
  for lib in $A $B; do
    echo "== timeline $lib"
    python3 tools/timeline.py deepseek-v4-flash 1,4,16 $lib/deepseek-v4-flash/sm90 2>&1 | grep -A1 "^T="
    python3 tools/timeline.py gpt-oss-120b 1,16 $lib/gpt-oss-120b/sm90 2>&1 | grep -A1 "^T="
  done
  m=deepseek-v4-flash
  for o in a b; do
    if [ $o = a ]; then D=$B; C=ccbe5a3=$A/$m/sm90; else D=$A; C=new=$B/$m/sm90; fi
    timeout -k 5 120 python3 -m moegen bench --model $m --out $D --compare $C --tokens 1,2,4,8,16 --rounds 4 \
      --json $OUTD/bench3-$m-$o.json > $OUTD/bench3-$m-$o.txt 2>&1
    echo "bench $m $o rc $?"; grep -v Warning $OUTD/bench3-$m-$o.txt | tail -12 | cut -d'|' -f2-5
  done ;;
T)
  # the GPU tests (MODEL-free: every BF16 variant, or the -k expression given as MOEGEN_K)
  cp -n generated/_carrystore/.objects/* generated/.objects/ 2>/dev/null || { mkdir -p generated/.objects && cp generated/_carrystore/.objects/* generated/.objects/; }
  timeout -k 5 ${MOEGEN_T_TIMEOUT:-500} python3 -m pytest -m gpu tests/test_gpu_layer.py -k "${MOEGEN_K:-not nothing}" -q -p no:cacheprovider > /tmp/gputest.txt 2>&1
  echo "gpu tests rc $?"; grep -E "seed|passed|failed|error" /tmp/gputest.txt | tail -8 ;;
W)
  # the W4A8 GPU tests of the variants with at most 128 local experts (one warp's schedule), on the
  # tests' libraries carried from here
  cp -n generated/_carrystore/.objects/* generated/.objects/ 2>/dev/null || { mkdir -p generated/.objects && cp generated/_carrystore/.objects/* generated/.objects/; }
  timeout -k 5 300 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider \
    -k "gpt-oss-120b-w4a8 or qwen3-30b-a3b-w4a8 or qwen3-30b-a3b-ep1of4-w4a8" > /tmp/gputest-w4a8.txt 2>&1
  echo "gpu tests rc $?"; grep -E "seed|passed|failed|error" /tmp/gputest-w4a8.txt | tail -8 ;;
esac
done
