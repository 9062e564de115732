// GEMM epilogues of the MoE layer (GEMM1: SwiGLU; GEMM2: bias and routing weight), specialized by
// the generated `Problem` struct.  Every GEMM kernel's translation unit includes this.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#include "moegen/moe_common.cuh"
#include "moegen/sm90_mxfp4_grouped_gemm.cuh"

namespace moegen {

template <class P>
__device__ __forceinline__ float activation(float gate, float up) {
  if constexpr (P::kHasLimit) {
    gate = fminf(gate, P::kLimit);
    up = fminf(fmaxf(up, -P::kLimit), P::kLimit);
  }
  // Fast exp and divide (MUFU): outputs are rounded to bf16, and the IEEE versions cost ~25 more
  // instructions per element of the GEMM1 epilogue.  exp overflowing to inf gives gate * 0 = -0.
  if constexpr (P::kActivation == kSwiGLUOai) {
    return __fdividef(gate, 1.0f + __expf(-P::kAlpha * gate)) * (up + 1.0f);
  } else {
    return __fdividef(gate, 1.0f + __expf(-gate)) * up;
  }
}

// Epilogue loads go before the stores they feed, in chunks: the compiler must assume a bf16 store
// may alias a float load, so a load placed after a store waits for it, and an epilogue that
// interleaved them (one routing weight per element) was a serial chain of L2 round trips, ~128 per
// thread at m64n256 (ptxas SASS; GEMM2 at T = 16384 stalled on long scoreboard 3.2 per issue).
constexpr int kEpilogueChunk = 16;

// GEMM1 epilogue: prepare interleaves W1|W3 in blocks of 8 rows (gate rows r..r+7, then the
// matching up rows), so accumulator rows g and g+8 of a thread are gate and up of one column.
template <class P>
struct SwigluEpilogue {
  template <class Accum, class Coords>
  __device__ static void apply(const sm90::GemmParams& p, const Accum& acc, const Coords& coords, int expert,
                               int row_base, int row0, int row_end) {
    constexpr int I = P::kInter;
    const float escale = __ldg(p.expert_scale + expert);
    // Every element of this thread is gate/up row pair g / g+8 of one intermediate column j.
    const int r_first = row_base + cute::get<0>(coords(0));
    const int j_first = (r_first / 16) * 8 + r_first % 16;
    float bias_gate = 0.f, bias_up = 0.f;
    if constexpr (P::kBias13) {
      if (j_first < I) {
        bias_gate = __ldg(p.bias + size_t(expert) * 2 * I + j_first);
        bias_up = __ldg(p.bias + size_t(expert) * 2 * I + I + j_first);
      }
    }
    CUTE_UNROLL
    for (int e = 0; e < cute::size(acc); e += 4) {
      CUTE_UNROLL
      for (int v = 0; v < 2; ++v) {  // elements e+v (row g) and e+v+2 (row g+8)
        auto mn = coords(e + v);
        int r = row_base + cute::get<0>(mn);
        int j = (r / 16) * 8 + r % 16;
        int row = row0 + cute::get<1>(mn);
        if (j < I && row < row_end) {
          float gate = acc(e + v) * escale + bias_gate, up = acc(e + v + 2) * escale + bias_up;
          p.out[size_t(row) * I + j] = __float2bfloat16(activation<P>(gate, up));
        }
      }
    }
  }
};

// GEMM2 epilogue: bias, then the routing weight of the row; finalize sums the rows per token.
template <class P>
struct WeightedEpilogue {
  template <class Accum, class Coords>
  __device__ static void apply(const sm90::GemmParams& p, const Accum& acc, const Coords& coords, int expert,
                               int row_base, int row0, int row_end) {
    constexpr int H = P::kHidden, kElems = decltype(cute::size(acc))::value;
    // kElems = N/2 (N a multiple of 8), e.g. 24 at N = 48: the largest of 16, 8, 4 dividing it
    constexpr int kChunk = kElems % kEpilogueChunk == 0 ? kEpilogueChunk : (kElems % 8 == 0 ? 8 : 4);
    static_assert(kElems % kChunk == 0, "accumulator elements come in whole chunks");
    const float escale = __ldg(p.expert_scale + expert);
    CUTE_UNROLL
    for (int e0 = 0; e0 < kElems; e0 += kChunk) {
      float scale[kChunk];  // routing weight of each element's token row
      float bias[kChunk];
      CUTE_UNROLL
      for (int i = 0; i < kChunk; ++i) {
        auto mn = coords(e0 + i);
        const int n = row_base + cute::get<0>(mn), row = row0 + cute::get<1>(mn);
        scale[i] = row < row_end ? __ldg(p.row_weight + row) : 0.f;
        bias[i] = 0.f;
        if constexpr (P::kBias2) bias[i] = n < H ? __ldg(p.bias + size_t(expert) * H + n) : 0.f;
      }
      CUTE_UNROLL
      for (int i = 0; i < kChunk; ++i) {
        auto mn = coords(e0 + i);
        const int n = row_base + cute::get<0>(mn), row = row0 + cute::get<1>(mn);
        if (n < H && row < row_end)
          p.out[size_t(row) * H + n] = __float2bfloat16((acc(e0 + i) * escale + bias[i]) * scale[i]);
      }
    }
  }
};

}  // namespace moegen
