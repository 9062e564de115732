#!/usr/bin/env bash
# The sixth 2026-12-01 session, after `source lab/device_env.sh`: (1) the decode experiment
# (lab/experiments/decode_gemv_bench.cu: is mma.sync bitwise wgmma; what a ring-less decode GEMM streams,
# by what it does per atom); (2) DeepSeek-V4-Flash's table retuned in round p (tuner settled into the
# power cap) against the table before it: generated/_new (default build, configs/dispatch) against
# generated/_default (the previous table, as its user table in generated/_default/dispatch).  $OUT/.
set -uo pipefail
OUT=$1
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a lab/experiments/decode_gemv_bench.cu -o /tmp/dg &&
  timeout 150 /tmp/dg 2>&1 | tee "$OUT/decode_gemv.txt"
timeout 300 python3 -m moegen bench --model deepseek-v4-flash --out generated/_new \
  --compare previous=generated/_default/deepseek-v4-flash/sm90 --tokens 1,4,16,64,256,1024,4096,16384 --reps 10 \
  --warm-seconds 2 --json "$OUT/bench_q.json" > "$OUT/bench_q.md" 2> "$OUT/bench_q.log"; echo "bench rc $?"
grep -E "^\||ceilings" "$OUT/bench_q.md"; grep -iE "warn|error" "$OUT/bench_q.log" | head
