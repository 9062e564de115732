// The SM100 grouped GEMM's launch arguments (no CUTLASS here: the layer's translation unit includes
// this, the GEMM units build CUTLASS's arguments from it on the device).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

namespace moegen::sm100 {

// out[row, :n_out] = tokens[row, :k] x weights[expert(row)]^T for every expert-ordered row, MXFP8 x MXFP4.
struct GroupedGemmArgs {
  int groups;                    // local experts
  int n_out;                     // the weights' rows: the output width
  int k;                         // the reduction length, padded to 128 (activations and weights alike)
  const uint8_t* weights;        // e2m1 pairs [groups, n_pad, k / 2] (moegen.layout.SM100_BLOCK_SCALED)
  long weights_group_bytes;      // n_pad * k / 2
  const uint8_t* weight_sf;      // [groups, weight_sf_group_bytes], block-scaled layout
  long weight_sf_group_bytes;
  const uint8_t* tokens;         // e4m3 [rows, k]
  const uint8_t* token_sf;       // expert e's scales at token_sf + token_sf_rows[e] * (k / 32)
  const int32_t* offsets;        // [groups + 1] expert-order rows (device)
  const int32_t* token_sf_rows;  // [groups + 1] padded-row offsets of each expert's scales (device)
  __nv_bfloat16* out;            // [rows, n_out]
  void* scratch;                 // the GEMM's device arguments and CUTLASS's workspace
  size_t scratch_bytes;
};

// A launch returns a cudaError_t (0: launched), or, for a failure on the host before CUTLASS's kernel
// ran, -(1000 * step + the cutlass::Status of that step, 0 for the scratch check): the layer names both
// (a CUTLASS failure is not a kernel fault, and reads as one under a CUDA error's name).
// Both the kernel's and the layer's translation units declare `<kernel name>_launch` by this type.
using GemmLaunchFn = int(const GroupedGemmArgs* args, cudaStream_t stream);
typedef GemmLaunchFn* GemmLaunch;
enum GemmLaunchStep : int { kStepScratch = 1, kStepCanImplement = 2, kStepInitialize = 3, kStepRun = 4 };
constexpr int launch_failure(GemmLaunchStep step, int status) { return -(1000 * int(step) + status); }
inline const char* launch_step_name(int rc) {
  switch (-rc / 1000) {
    case kStepScratch: return "its device arguments and workspace exceed the scratch (scratch_bytes_bound)";
    case kStepCanImplement: return "CUTLASS's can_implement refused the problem";
    case kStepInitialize: return "CUTLASS's initialize (tensor maps, workspace, shared-memory attribute) failed";
    case kStepRun: return "CUTLASS's run (the launch) failed";
    default: return "an unknown step failed";
  }
}

// Scratch a GEMM of this many groups needs, at most (the unit checks the exact figure at launch):
// per group its shape, six pointers, four strides and two scale layouts, and CUTLASS's workspace,
// which grows with the SM count (1 KiB per SM is well above 4.2's 5 x 128 B per SM).
constexpr size_t scratch_bytes_bound(int groups, int sms = 256) { return size_t(groups) * 256 + size_t(sms) * 1024 + 65536; }

}  // namespace moegen::sm100
