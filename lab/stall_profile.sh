#!/usr/bin/env bash
# Stall reasons, instruction mix and pipe use of the layer's grouped GEMMs at token count $2 under
# ncu (device machine; source lab/device_env.sh first).  Usage: stall_profile.sh MODEL T [BUILD_DIR]
set -uo pipefail
reasons="barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle \
membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait"
m="gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
m="$m,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
m="$m,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
m="$m,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active"
m="$m,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
m="$m,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,sm__warps_active.avg.per_cycle_active"
m="$m,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed"
for r in $reasons; do m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
ncu --clock-control none -k regex:"grouped_gemm" --launch-skip 2 --launch-count 2 --metrics "$m" \
  python3 lab/profile_run.py "$@" 2>&1 | grep -E "grouped_gemm_kernel<|kernels:|  [a-z_]+__" | \
  sed -E 's/void grouped_gemm_kernel<GroupedGemm<TileShape<([0-9, ]+)>, ([0-9]+), ([0-9]+).*/== tile \1 N=\2 K=\3/'
