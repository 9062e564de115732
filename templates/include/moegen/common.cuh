// Compile-time vocabulary shared by the generated problem structs, routing and epilogues.  GEMM
// kernels include this: the router's vocabulary lives in routing.cuh, so it can grow without
// rebuilding them.
#pragma once

namespace moegen {

enum ActivationKind { kSwiGLU = 0, kSwiGLUOai = 1 };

constexpr int kWarpSize = 32;

}  // namespace moegen
