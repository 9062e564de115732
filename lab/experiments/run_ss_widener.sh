#!/usr/bin/env bash
# Device machine, after `source lab/device_env.sh` (the CUTLASS headers): build and run
# ss_widener_bench.cu, then ncu's tensor-pipe and shared-memory use per mode.
#   bash lab/experiments/run_ss_widener.sh OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
CI=$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I"$CI" lab/experiments/ss_widener_bench.cu -o /tmp/ssw || exit 1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 120 /tmp/ssw 2>&1 | tee "$OUT/ss_widener.txt"
m="gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
m="$m,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active"
m="$m,sm__cycles_elapsed.avg.per_second"
for k in 0 1 2 3 4 5; do
  timeout 100 ncu --clock-control none --kernel-name-base demangled -k "regex:tile_kernel<.int.$k>" --launch-skip 2 \
    --launch-count 1 --metrics "$m" /tmp/ssw >> "$OUT/ss_widener_ncu.txt" 2>&1
done
grep -E "tile_kernel|duration|gmma|shared|issue_active|per_second" "$OUT/ss_widener_ncu.txt" | sed -E 's/ +/ /g' | cut -c1-110
