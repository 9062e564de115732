#!/usr/bin/env bash
# Device machine: build and run tma_row_multicast_bench.cu at T = 16384 and 4096 (times per mode, the
# slot layout checked), then ncu's L2 and DRAM read bytes per mode at T = 16384.
#   bash lab/experiments/run_tma_multicast.sh OUT
set -uo pipefail
OUT=$1; mkdir -p "$OUT"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a lab/experiments/tma_row_multicast_bench.cu -o /tmp/tmab || exit 1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
for t in 16384 4096; do timeout 120 /tmp/tmab $t 9 2>&1 | tee "$OUT/tma_$t.txt"; done
m="gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_bytes.sum,dram__bytes_read.sum"
m="$m,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
timeout 240 ncu --clock-control none -k regex:stream_kernel --metrics "$m" /tmp/tmab 16384 1 > "$OUT/tma_ncu.txt" 2>&1
grep -E "stream_kernel|duration|sectors|bytes|throughput" "$OUT/tma_ncu.txt" | sed -E 's/ +/ /g' | head -80
