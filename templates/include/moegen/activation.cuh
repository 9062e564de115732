// Activation math of GEMM1's epilogue, arch-neutral: every arch's epilogue calls it per element.
#pragma once
#include "moegen/common.cuh"

namespace moegen {

// P: the epilogue's compile-time problem (kActivation, kHasLimit, kLimit, kAlpha).
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

}  // namespace moegen
