#!/usr/bin/env bash
# The fifth 2026-12-01 session's tuner check, after `source lab/device_env.sh`: does the settle before
# each candidate's timing (moegen tune --settle-seconds, new) make the tuner rank DeepSeek-V4-Flash's
# kernels as the power-capped bench does?  Tunes the carried library (the shortlist and the shipped
# table's picks, generated/deepseek-v4-flash/sm90) with the shipped tables' settings plus the settle,
# then benches its raw picks (generated/dispatch) against the shipped table's (generated/_default) in
# one run.  The table is compacted offline (lab/compact_table.py).  $OUT/results.tgz.
set -uo pipefail
# DeepSeek-V4-Flash's shortlist and the shipped table's picks (28 kernels)
KERNELS=moegen_sm90_gemm1_m128n128k64s4,moegen_sm90_gemm1_m128n32k64s6,moegen_sm90_gemm1_m128n64k64s6,\
moegen_sm90_gemm1_m256n128k64s6,moegen_sm90_gemm1_m256n128k64s8,moegen_sm90_gemm1_m256n64k64s6,\
moegen_sm90_gemm1_m64n16k128s4,moegen_sm90_gemm1_m64n16k64s4,moegen_sm90_gemm1_m64n16k64s6,\
moegen_sm90_gemm1_m64n32k128s4,moegen_sm90_gemm1_m64n32k64s4,moegen_sm90_gemm1_m64n8k128s4,\
moegen_sm90_gemm1_m64n8k128s6,moegen_sm90_gemm1_m64n8k64s6,moegen_sm90_gemm1_m64n8k64s8,\
moegen_sm90_gemm2_m128n128k64s4,moegen_sm90_gemm2_m128n32k64s6,moegen_sm90_gemm2_m128n64k64s6,\
moegen_sm90_gemm2_m256n128k64s6,moegen_sm90_gemm2_m256n64k64s6,moegen_sm90_gemm2_m64n16k128s4,\
moegen_sm90_gemm2_m64n16k64s4,moegen_sm90_gemm2_m64n16k64s6,moegen_sm90_gemm2_m64n32k128s4,\
moegen_sm90_gemm2_m64n32k64s4,moegen_sm90_gemm2_m64n8k128s6,moegen_sm90_gemm2_m64n8k64s6,\
moegen_sm90_gemm2_m64n8k64s8
OUT=$1; R=/tmp/round_p; rm -rf $R; mkdir -p $R
timeout 300 python3 -m moegen tune --model deepseek-v4-flash --kernels $KERNELS --no-build --tolerance 0 \
  --buckets 1,4,16,64,256,1024,4096,16384 --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 \
  --settle-seconds 0.25 > $R/tune.log 2>&1; echo "tune rc $?"
grep -E "timings in|T=|rror" $R/tune.log | tail -10
cp generated/dispatch/sm90/*/e256-l256-k6-h4096-i2048.json $R/raw.json
timeout 200 python3 -m moegen bench --model deepseek-v4-flash --out generated/_default \
  --compare settled=generated/deepseek-v4-flash/sm90 --tokens 1,4,16,64,256,1024,4096,16384 --reps 10 \
  --warm-seconds 2 --json $R/bench.json > $R/bench.md 2> $R/bench.log; echo "bench rc $?"
grep -E "^\||ceilings" $R/bench.md
tar czf "$OUT/results.tgz" -C $R .
