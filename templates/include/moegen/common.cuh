// Compile-time vocabulary shared by the generated problem structs, routing and epilogues.  GEMM
// kernels include this: the router's vocabulary lives in routing.cuh, so it can grow without
// rebuilding them.
#pragma once

#include <utility>

namespace moegen {

enum ActivationKind { kSwiGLU = 0, kSwiGLUOai = 1 };

constexpr int kWarpSize = 32;

// f(std::integral_constant<int, U>{}) for U in 0..N-1, force-inlined: cute::for_each's fold lambda
// is outlined once its body is large (a 544-byte stack frame at m64n128k64s8, the accumulators
// passed through local memory).  Mark the lambdas passed here MOEGEN_INLINE for the same reason.
template <class F, int... U>
__device__ __forceinline__ void static_for(F&& f, std::integer_sequence<int, U...>) {
  (f(std::integral_constant<int, U>{}), ...);
}
template <int N, class F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for(f, std::make_integer_sequence<int, N>{});
}

#define MOEGEN_INLINE __attribute__((always_inline))

}  // namespace moegen
