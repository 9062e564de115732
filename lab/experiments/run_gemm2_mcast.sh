#!/usr/bin/env bash
# Device run for GEMM2's shared B tile (gemm2_b_operand_mcast.patch): the patched DeepSeek-V4-Flash BF16
# build in generated/_exp/mcast, the default build in generated.  `moegen check` and every kernel bit
# for bit against the default build with MOEGEN_B_MCAST=1, then bench against the default build in
# both orders (the variable only reaches the patched library).
# Stage: `bash lab/stage_carry.sh generated/deepseek-v4-flash generated/_exp/mcast`.
# After `source lab/device_env.sh`:   bash lab/experiments/run_gemm2_mcast.sh OUT
set -uo pipefail
OUT=$1; R=/tmp/mcast; mkdir -p $R
X=generated/_exp/mcast; M=deepseek-v4-flash
export MOEGEN_B_MCAST=1
timeout -k 5 150 python3 -m moegen check --model $M --out $X --tokens 0,1,7,33,300,2048,4100 > $R/check.txt 2>&1
echo "check rc $?: $(tail -1 $R/check.txt)"
timeout -k 5 200 python3 lab/bitwise_ab.py generated/$M/sm90 $X/$M/sm90 $M --tokens 1,37,300,2048,4100 > $R/bitwise.txt 2>&1
echo "bitwise rc $?"; tail -4 $R/bitwise.txt
tar czf $OUT/results.tgz -C $R .
for o in a b; do
  if [ $o = a ]; then D=generated; C=mcast=$X/$M/sm90; else D=$X; C=def=generated/$M/sm90; fi
  timeout -k 5 200 python3 -m moegen bench --model $M --out $D --compare $C --tokens 256,1024,4096,16384 \
    --rounds 2 --json $R/bench-$o.json > $R/bench-$o.txt 2>&1
  echo "bench $o rc $?"; grep -v Warning $R/bench-$o.txt | tail -8
  tar czf $OUT/results.tgz -C $R .
done
