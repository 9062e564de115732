#!/usr/bin/env bash
# Device machine: build and run decode_gemv_bench.cu (timings), then ncu stall reasons of its stream
# variants (GEMM1 shape, one token).   bash lab/experiments/run_decode_gemv.sh OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a lab/experiments/decode_gemv_bench.cu -o /tmp/dg || exit 1
timeout 150 /tmp/dg 2>&1 | tee "$OUT/decode_gemv.txt"
reasons="barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle \
membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait"
m="gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
m="$m,sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
m="$m,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
m="$m,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
m="$m,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed"
m="$m,sm__warps_active.avg.per_cycle_active,lts__throughput.avg.pct_of_peak_sustained_elapsed"
for r in $reasons; do m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
timeout 200 ncu --clock-control none --kernel-name-base demangled -k regex:"decode_gemm" --launch-count 20 --metrics "$m" \
  /tmp/dg profile > "$OUT/decode_gemv_ncu.txt" 2>&1
grep -E "decode_gemm<|duration|inst_executed.sum|issue_active|tensor|stalled_(long_scoreboard|wait|math_pipe|short_scoreboard|mio|lg_throttle|not_selected|selected|dispatch|no_instruction)|warps_active|dram__" \
  "$OUT/decode_gemv_ncu.txt" | sed -E 's/ +/ /g' | head -150
