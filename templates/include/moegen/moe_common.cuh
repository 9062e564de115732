// Compile-time vocabulary shared by the generated problem header, routing and epilogues.
#pragma once

namespace moegen {

enum RouterKind { kSigmoidGroupTopK = 0, kSoftmaxTopK = 1, kTopKSoftmax = 2 };
enum GroupScore { kGroupMax = 0, kGroupTop2Sum = 1 };
enum ActivationKind { kSwiGLU = 0, kSwiGLUOai = 1 };

constexpr int kWarpSize = 32;

}  // namespace moegen
