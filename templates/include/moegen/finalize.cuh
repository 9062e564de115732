// The layer's last stage, arch-neutral: each token's top-k weighted GEMM2 rows summed back into
// token order.  Only the layer's translation unit includes this.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#include "moegen/pdl.cuh"

namespace moegen {

// out[t, :] = sum over the token's local slots of the weighted GEMM2 rows (zero if none).
template <class P>
__global__ void finalize_kernel(int num_tokens, const int32_t* __restrict__ token_row,
                                const __nv_bfloat16* __restrict__ y, __nv_bfloat16* __restrict__ out) {
  constexpr int H = P::kHidden, VEC = 8, PER_ROW = H / VEC;  // H is a multiple of 32
  pdl_wait();
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= num_tokens * PER_ROW) return;
  int t = idx / PER_ROW, c = (idx % PER_ROW) * VEC;
  float acc[VEC] = {};
#pragma unroll
  for (int k = 0; k < P::kTopK; ++k) {
    int row = token_row[t * P::kTopK + k];
    if (row >= 0) {
      uint4 v = *reinterpret_cast<const uint4*>(y + size_t(row) * H + c);
      const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += __bfloat162float(b[j]);
    }
  }
  uint4 o;
  __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
  for (int j = 0; j < VEC; ++j) ob[j] = __float2bfloat16(acc[j]);
  *reinterpret_cast<uint4*>(out + size_t(t) * H + c) = o;
}

}  // namespace moegen
