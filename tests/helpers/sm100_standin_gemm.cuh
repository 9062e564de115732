// A stand-in for the SM100 GEMM units on any GPU: the same launch contract (sm100/gemm_args.h) and the
// same first steps as the real unit (sm100/grouped_gemm.cuh: the device arrays carved from the scratch
// and filled by fill_group_args for the unit's GroupedGemm), then, where CUTLASS's kernel would run, plain
// CUDA cores compute each group from those arrays alone: its shape, operand pointers, strides and CUTLASS's
// block-scaled scale layouts.  A wrong pointer, stride or scale layout therefore fails the check as it
// would on a B200.  tests/test_sm100_glue_gpu.py links it in place of CUTLASS's kernels, so that the SM100
// layer's own code runs on the H200 against the float64 reference.  One thread per output, K in order, fp32,
// stored as bf16: deterministic.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "moegen/sm100/grouped_gemm.cuh"

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

// Group blockIdx.y: D (M x N) = A (M x K, e2m1 weights) x B (N x K, e4m3 tokens), both block-scaled.
template <class G>
__global__ void standin_from_arrays(typename G::Arrays arr) {
  using namespace cute;
  const int g = blockIdx.y;
  const int M = get<0>(arr.shapes[g]), N = get<1>(arr.shapes[g]), K = get<2>(arr.shapes[g]);
  const auto a = make_layout(make_shape(M, K, 1), arr.sa[g]);  // element offsets, as CUTLASS's TMA reads them
  const auto b = make_layout(make_shape(N, K, 1), arr.sb[g]);
  const auto d = make_layout(make_shape(M, N, 1), arr.sd[g]);
  const auto* A = reinterpret_cast<const uint8_t*>(arr.a[g]);
  const auto* B = reinterpret_cast<const uint8_t*>(arr.b[g]);
  const auto* SFA = reinterpret_cast<const uint8_t*>(arr.sfa[g]);
  const auto* SFB = reinterpret_cast<const uint8_t*>(arr.sfb[g]);
  auto* D = reinterpret_cast<__nv_bfloat16*>(arr.d[g]);
  for (long i = long(blockIdx.x) * blockDim.x + threadIdx.x; i < long(M) * N; i += long(gridDim.x) * blockDim.x) {
    const int n = int(i / M), m = int(i % M);
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += 32) {
      float block = 0.f;
      for (int k = k0; k < k0 + 32; ++k) {
        const long ai = a(m, k, 0);  // e2m1 elements: two per byte, the even one in the low nibble
        block += e2m1_value(A[ai / 2] >> (4 * (ai & 1))) * e4m3_value(B[b(n, k, 0)]);
      }
      acc += block * e8m0_value(SFA[arr.lsfa[g](m, k0, 0)]) * e8m0_value(SFB[arr.lsfb[g](n, k0, 0)]);
    }
    D[d(m, n, 0)] = __float2bfloat16(acc);
  }
}

template <class G>
int standin_grouped_gemm(const moegen::sm100::GroupedGemmArgs& a, cudaStream_t stream) {
  typename G::Arrays arr{};
  const size_t carved = moegen::sm100::carve_arrays<G>(arr, static_cast<uint8_t*>(a.scratch), a.groups);
  if (carved > a.scratch_bytes) return moegen::sm100::launch_failure(moegen::sm100::kStepScratch, 0);
  moegen::sm100::fill_group_args<G><<<(a.groups + 127) / 128, 128, 0, stream>>>(a, arr);
  standin_from_arrays<G><<<dim3(132 * 4, a.groups), 256, 0, stream>>>(arr);
  return int(cudaGetLastError());
}

}  // namespace
}  // namespace moegen_test
