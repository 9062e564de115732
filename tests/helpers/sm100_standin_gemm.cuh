// A stand-in for the SM100 GEMM units on any GPU: the same launch contract (sm100/gemm_args.h), the
// same operands in the same layouts (e2m1 pairs and block-scaled scales, moegen.layout.SM100_BLOCK_SCALED;
// e4m3 tokens with their per-expert scale rows), computed by plain CUDA cores in fp32 and stored as bf16.
// tests/test_sm100_glue_gpu.py links it in place of CUTLASS's kernels, so that the SM100 layer's own
// code (routing, scale rows, quantizers, SwiGLU, finalize, workspace carving, the launch sequence) runs
// on the H200 against the float64 reference.  One thread per output, K in order: deterministic.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "moegen/quantize.cuh"  // sf_offset, segment_of: the layout the quantizers write
#include "moegen/sm100/gemm_args.h"

namespace moegen_test {
namespace {  // each GEMM unit's own copy

__device__ __forceinline__ float e2m1_value(unsigned code) {
  constexpr float kMagnitude[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float m = kMagnitude[code & 7];
  return code & 8 ? -m : m;
}

__device__ __forceinline__ float e8m0_value(uint8_t s) { return exp2f(float(int(s) - 127)); }

__device__ __forceinline__ float e4m3_value(uint8_t b) {
  __nv_fp8_e4m3 v;
  v.__x = b;
  return float(v);
}

__global__ void standin_grouped_gemm_kernel(moegen::sm100::GroupedGemmArgs a) {
  const long rows = a.offsets[a.groups];
  const long items = rows * a.n_out;
  const int kbs = a.k / 32;
  for (long i = long(blockIdx.x) * blockDim.x + threadIdx.x; i < items; i += long(gridDim.x) * blockDim.x) {
    const int row = int(i / a.n_out), m = int(i % a.n_out);
    const int g = moegen::segment_of(a.offsets, a.groups, row);
    const int n = row - a.offsets[g];  // the token row among its expert's
    const uint8_t* w = a.weights + g * a.weights_group_bytes + long(m) * (a.k / 2);
    const uint8_t* wsf = a.weight_sf + g * a.weight_sf_group_bytes;
    const uint8_t* x = a.tokens + long(row) * a.k;
    const uint8_t* xsf = a.token_sf + long(a.token_sf_rows[g]) * kbs;
    float acc = 0.f;
    for (int kb = 0; kb < kbs; ++kb) {
      float block = 0.f;
      for (int j = 0; j < 32; j += 2) {
        const uint8_t pair = w[kb * 16 + j / 2];  // low nibble: the even K index
        block += e2m1_value(pair & 15) * e4m3_value(x[kb * 32 + j]);
        block += e2m1_value(pair >> 4) * e4m3_value(x[kb * 32 + j + 1]);
      }
      acc += block * e8m0_value(wsf[moegen::sf_offset(m, kb, a.k)]) * e8m0_value(xsf[moegen::sf_offset(n, kb, a.k)]);
    }
    a.out[long(row) * a.n_out + m] = __float2bfloat16(acc);
  }
}

inline int standin_grouped_gemm(const moegen::sm100::GroupedGemmArgs* a, cudaStream_t stream) {
  standin_grouped_gemm_kernel<<<132 * 16, 256, 0, stream>>>(*a);
  return int(cudaGetLastError());
}

}  // namespace
}  // namespace moegen_test
