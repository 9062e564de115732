// SM90 GEMM epilogues of the MoE layer (GEMM1: SwiGLU; GEMM2: bias and routing weight): they walk
// the wgmma accumulator layout (a thread holds rows g and g + 8 of its warp's 16, token columns
// 2 (lane % 4) + 8 i + {0, 1}).  The activation math is arch-neutral (moegen/activation.cuh).
// Specialized by the kernel's compile-time `Problem` (sizes, activation, biases); the grouped GEMM
// kernel includes this.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>
#include <cute/tensor.hpp>

#include "moegen/activation.cuh"
#include "moegen/sm90/gemm_params.cuh"

namespace moegen::sm90 {

// Epilogues take the expert's scale (2^shift folded out of its e8m0 scales) from the kernel, which
// loads it with the tile's other epilogue inputs just before the epilogue (stage_epilogue_inputs).
//
// GEMM1 epilogue: prepare interleaves W1|W3 in blocks of 8 rows (gate rows r..r+7, then the
// matching up rows), so accumulator rows g and g+8 of a thread are gate and up of one column.
//
// Per-row factors (token columns of the accumulators), staged by the kernel in shared memory as
// [BN][kRowFactors]: the activation row's e4m3 scale first (W4A8, kActScale), then GEMM2's routing
// weight.  A thread's element e sits in token column 2 (lane % 4) + 8 (e / 4) + e % 2.
template <class P>
struct SwigluEpilogue {
  static constexpr bool kActScale = P::kFp8Activations;
  static constexpr bool kRoutingWeight = false;
  static constexpr int kRowFactors = kActScale;
  using Out = __nv_bfloat16;  // GEMM2's B operand (quantized per row again for W4A8 GEMM2s)
  template <class Accum, class Coords>
  __device__ static void apply(const GemmParams& p, const Accum& acc, const Coords& coords, int expert,
                               int row_base, int row0, int row_end, float escale, const float* row_factors) {
    constexpr int I = P::kInter;
    const float* act_scales = row_factors + 2 * (threadIdx.x % 4) * kRowFactors;
    Out* out = static_cast<Out*>(p.out);
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
          float scale = escale;
          if constexpr (kActScale) scale *= act_scales[(8 * (e / 4) + v) * kRowFactors];
          float gate = acc(e + v) * scale + bias_gate, up = acc(e + v + 2) * scale + bias_up;
          out[size_t(row) * I + j] = __float2bfloat16(activation<P>(gate, up));
        }
      }
    }
  }
};

// GEMM2 epilogue: bias, then the routing weight of the row (staged in shared memory by the kernel
// before the epilogue: `row_factors[row - row0]`); finalize sums the rows per token.  The rows stay
// fp32: rounding each of a token's top-k rows to bf16 before the sum added about 1.5e-3 to the
// layer's relative error (2.9e-3 -> 2.3e-3 against float64 in simulation; what remains is `h` and
// the output being bf16).  No global load sits between the stores, so they stream; eight lanes
// write 32 contiguous bytes of one row, a whole sector.
template <class P>
struct WeightedEpilogue {
  static constexpr bool kActScale = P::kFp8Activations;
  static constexpr bool kRoutingWeight = true;
  static constexpr int kRowFactors = kActScale + 1;
  using Out = float;
  template <class Accum, class Coords>
  __device__ static void apply(const GemmParams& p, const Accum& acc, const Coords& coords, int expert,
                               int row_base, int row0, int row_end, float escale, const float* row_factors) {
    constexpr int H = P::kHidden;
    Out* out = static_cast<Out*>(p.out);
    // A thread's elements lie on two output rows n: those of elements 0 and 2 (rows g and g + 8).
    float bias_lo = 0.f, bias_hi = 0.f;
    if constexpr (P::kBias2) {
      const int n_lo = row_base + cute::get<0>(coords(0)), n_hi = row_base + cute::get<0>(coords(2));
      if (n_lo < H) bias_lo = __ldg(p.bias + size_t(expert) * H + n_lo);
      if (n_hi < H) bias_hi = __ldg(p.bias + size_t(expert) * H + n_hi);
    }
    // Element e sits in token column 2 (lane % 4) + 8 (e / 4) + e % 2 (the wgmma accumulator
    // layout): one base register plus immediates, rather than an address per element, which
    // ptxas hoisted out of the tile loop and spilled.
    const float* factors = row_factors + 2 * (threadIdx.x % 4) * kRowFactors;
    CUTE_UNROLL
    for (int e = 0; e < cute::size(acc); ++e) {
      auto mn = coords(e);
      const int n = row_base + cute::get<0>(mn), row = row0 + cute::get<1>(mn);
      if (n < H && row < row_end) {
        const float bias = (e & 2) ? bias_hi : bias_lo;
        const float* f = factors + (8 * (e / 4) + e % 2) * kRowFactors;
        float scale = escale;
        if constexpr (kActScale) scale *= f[0];
        out[size_t(row) * H + n] = (acc(e) * scale + bias) * f[kRowFactors - 1];
      }
    }
  }
};

}  // namespace moegen::sm90
