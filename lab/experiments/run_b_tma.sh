#!/usr/bin/env bash
# Device run for gemm2_b_operand_tma.patch (not yet run): the patched DeepSeek-V4-Flash builds (BF16
# and W4A8) in generated/_exp/tma, the default builds beside them.  `moegen check` with TMA and with
# MOEGEN_B_TMA=0 (the same library gathering), then bench against the default build in both orders.
# Stage: `bash lab/stage_carry.sh generated/deepseek-v4-flash generated/deepseek-v4-flash-w4a8 generated/_exp/tma`.
# After `source lab/device_env.sh`:   bash lab/experiments/run_b_tma.sh OUT
set -uo pipefail
OUT=$1; R=/tmp/b_tma; mkdir -p $R
X=generated/_exp/tma
for a in bf16 fp8; do
  for tma in 1 0; do
    MOEGEN_B_TMA=$tma timeout -k 5 150 python3 -m moegen check --model deepseek-v4-flash --activations $a --out $X \
      --tokens 0,1,7,33,300,2048,4100 > $R/check-$a-$tma.txt 2>&1
    echo "check $a B_TMA=$tma rc $?: $(tail -1 $R/check-$a-$tma.txt)"
  done
done
tar czf $OUT/results.tgz -C $R .
for o in a b; do
  if [ $o = a ]; then D=generated; C=tma=$X/deepseek-v4-flash/sm90; else D=$X; C=def=generated/deepseek-v4-flash/sm90; fi
  timeout -k 5 250 python3 -m moegen bench --model deepseek-v4-flash --out $D --compare $C --tokens 256,1024,4096,16384 \
    --reps 6 --rounds 2 --warm-seconds 2 --json $R/bench-$o.json 2>/dev/null | cut -d'|' -f2-6
  tar czf $OUT/results.tgz -C $R .
done
