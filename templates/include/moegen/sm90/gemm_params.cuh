// Arguments of one SM90 grouped-GEMM launch, and the launch function its GEMM kernels export (SM100's:
// sm100/gemm_args.h): shared by the kernels and the layer's host code, which includes this rather than a mainloop.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace moegen {

struct GemmParams {
  const uint8_t* w;              // prepared weight atoms (the arch's weight layout)
  const uint8_t* w_scales;       // prepared scale atoms
  const float* expert_scale;     // [E]
  const float* bias;             // epilogue bias or nullptr
  const void* act;               // B operand rows (bf16, or e4m3 for W4A8 kernels), row length K
  const int32_t* act_row;        // permuted row -> source row of `act` (gather), or nullptr
  const float* act_scale;        // per source row of `act`: its e4m3 scale (W4A8), else unused
  // Work tiles (the routing's schedule): expert, first row, and the expert's end row: three
  // independent loads, one L2 round trip when a CTA starts a tile.
  const int32_t* work_expert;    // [max_work]
  const int32_t* work_row0;      // [max_work]
  const int32_t* work_row_end;   // [max_work]
  const int32_t* num_work;       // [1]
  const float* row_weight;       // [rows] routing weight per permuted row (GEMM2)
  void* out;                     // epilogue output rows, of the epilogue's type (Epilogue::Out)
  int schedule_ready;            // the schedule predates the previous kernel: read it before pdl wait
  // GEMM1 -> GEMM2 per expert: GEMM2's tiles start as their expert's `h` rows land rather than when the
  // last GEMM1 CTA ends (at decode GEMM1's CTAs end over a long tail).  GEMM1 adds token rows x weight
  // rows per finished tile to progress_add[expert]; GEMM2 waits per tile until progress_wait[expert]
  // reaches the expert's rows x progress_per_row (GEMM1's N).  nullptr: GEMM2 waits for all of GEMM1.
  unsigned long long* progress_add;
  const unsigned long long* progress_wait;
  const int32_t* expert_row0;    // [E + 1] the experts' first rows (routing's offsets): GEMM2's target
  unsigned long long progress_per_row;
};

// Every GEMM kernel translation unit exports one of these (`<kernel name>_launch`), and the layer's
// declares them by this type: a definition that differs fails to compile instead of linking (extern
// "C" names carry no signature).  `rows` is the layer's expert rows (tokens x top_k): the arch decides
// its grid policy from it.
using GemmLaunchFn = int(const GemmParams* params, int max_work, long rows, cudaStream_t stream);
typedef GemmLaunchFn* GemmLaunch;

}  // namespace moegen
