// SM90's part of the layer after routing: GEMM1 (gather fused into its B-operand loads, SwiGLU in
// its epilogue) -> GEMM2 (routing weight in its epilogue) -> finalize.  W4A8 (P::kFp8Activations)
// feeds both GEMMs e4m3 activation rows with one fp32 scale per row: the hidden states (token
// order; the routing warps quantize them, RoutingParams::hidden, and GEMM1 gathers them), and
// GEMM1's bf16 output (expert order; a quantizer between the GEMMs); the epilogues apply the
// scales.  The layer's translation unit includes this after moegen/layer.cuh.
#pragma once
#include "moegen/finalize.cuh"
#include "moegen/sm90/gemm_params.cuh"
#include "moegen/layer.cuh"
#include "moegen/quantize.cuh"

namespace moegen {

template <class P>
struct Pipeline {
  struct Workspace {
    RoutingWorkspace<P> routing;
    __nv_bfloat16* h;  // [rows, I] SwiGLU output in expert order
    float* y;          // [rows, H] weighted GEMM2 output in expert order (WeightedEpilogue::Out)
    uint8_t* x_q;      // W4A8: [T, H] e4m3 hidden states, token order
    float* x_scale;    // [T]
    uint8_t* h_q;      // [rows, I] e4m3 `h`
    float* h_scale;    // [rows]
  };

  // What the routing kernel writes for this pipeline: W4A8's e4m3 hidden rows, quantized beside it.
  static void bind_routing(RoutingParams& rp, const Workspace& ws, const void* hidden) {
    if constexpr (P::kFp8Activations) {
      rp.hidden = static_cast<const __nv_bfloat16*>(hidden);
      rp.hidden_q = ws.x_q;
      rp.hidden_scale = ws.x_scale;
    }
  }

  // Carves (or, with base == nullptr, measures) the workspace for num_tokens tokens.
  static size_t carve(Workspace* ws, uint8_t* base, int num_tokens) {
    Workspace dummy;
    Workspace& w = ws ? *ws : dummy;
    Carver c{base};
    const long rows = long(num_tokens) * P::kTopK;
    w.routing.carve(c, num_tokens);
    c.take(w.h, size_t(rows) * P::kInter);
    c.take(w.y, size_t(rows) * P::kHidden);
    w.x_q = w.h_q = nullptr;
    w.x_scale = w.h_scale = nullptr;
    if constexpr (P::kFp8Activations) {
      c.take(w.x_q, size_t(num_tokens) * P::kHidden);
      c.take(w.x_scale, size_t(num_tokens));
      c.take(w.h_q, size_t(rows) * P::kInter);
      c.take(w.h_scale, size_t(rows));
    }
    return c.bytes();
  }

  // GEMM2 follows GEMM1 per expert (GemmParams::progress_add / progress_wait) at small batches: there
  // GEMM1's CTAs end over a tail of waves through which GEMM2's CTAs would sit in pdl_wait.  H200, the
  // shipped picks, both bench orders:
  // - BF16, from 2 to 8 tokens: T = 2 3.7 % faster on DeepSeek-V4-Flash and 17 % on gpt-oss-120b, T = 4
  //   5-6 % on both, T = 8 within noise.  At T = 1 the CTAs end together and the polling cost 1.4-2.7 %;
  //   from T = 16 it gained nothing and cost up to 1.7 %.
  // - W4A8, from 1 to 8 tokens: the `h` quantizer sits between them, following GEMM1 per expert and
  //   followed by GEMM2 in turn.  DeepSeek-V4-Flash: T = 2 8.0 % faster, 3-4 5 %, 6 2 %, 8 1 %, and T = 1
  //   1.1 % (the quantizer's wait for GEMM1's grid and its own drain leave the chain); T = 16-32 within
  //   noise.
  // Only kernels that carry the progress code (KernelEntry::expert_progress) can.
  // MOEGEN_GEMM2_WAIT=expert | grid overrides the token range (a switch for benchmarking the two).
  static bool gemm2_waits_by_expert(int num_tokens, const KernelEntry& gemm1, const KernelEntry& gemm2) {
    static const int mode = [] {
      const char* v = getenv("MOEGEN_GEMM2_WAIT");
      if (v && strcmp(v, "grid") == 0) return 0;
      if (v && strcmp(v, "expert") == 0) return 1;
      return -1;
    }();
    if (!gemm1.expert_progress || !gemm2.expert_progress) return false;
    return mode >= 0 ? mode == 1 : num_tokens >= (P::kFp8Activations ? 1 : 2) && num_tokens <= 8;
  }

  static constexpr bool kBatched = true;

  static int run(const RoutingParams& rp, const Workspace& ws, const moegen_weights& w, const void* hidden, void* out,
                 const KernelEntry& gemm1, const KernelEntry& gemm2, LayerOutput output, cudaStream_t stream) {
    const RoutingWorkspace<P>& r = ws.routing;
    const int T = rp.num_tokens;
    const long rows = long(T) * P::kTopK;
    GemmParams g1{};
    g1.w = w.w13;
    g1.w_scales = w.w13_scales;
    g1.expert_scale = w.w13_expert_scale;
    g1.bias = w.b13;
    g1.act = P::kFp8Activations ? static_cast<const void*>(ws.x_q) : hidden;
    g1.act_scale = ws.x_scale;
    g1.act_row = r.row_token;  // gather fused into the B-operand loads
    g1.work_expert = r.work1_expert;
    g1.work_row0 = r.work1_row0;
    g1.work_row_end = r.work1_row_end;
    g1.num_work = r.num_work;
    g1.out = ws.h;
    g1.schedule_ready = 0;  // follows the kernel that wrote the schedule and the permutation
    const bool by_expert = gemm2_waits_by_expert(T, gemm1, gemm2);
    if (by_expert) g1.progress_add = r.expert_progress;
    int rc = reinterpret_cast<GemmLaunch>(gemm1.launch)(&g1, max_work_tiles(rows, gemm1.block_n, P::kLocalExperts),
                                                        rows, stream);
    if (rc) return fail(rc, "%s: %s", gemm1.name, cudaGetErrorString(cudaError_t(rc)));

    if constexpr (P::kFp8Activations) {  // the local experts' rows only: offsets[E_local]
      const dim3 grid{unsigned(rows)}, block{unsigned(kQuantizeRowThreads<P::kInter>)};
      const __nv_bfloat16* h = ws.h;
      const int32_t* offsets = r.offsets;
      cudaError_t e;
      if (by_expert)
        e = launch_pdl(quantize_rows_e4m3_following_kernel<P::kInter, P::kLocalExperts>, grid, block, 0, stream, h,
                       offsets, static_cast<const unsigned long long*>(r.expert_progress), 2ull * P::kInter,
                       r.quantized_rows, ws.h_q, ws.h_scale);
      else
        e = launch_pdl(quantize_rows_e4m3_kernel<P::kInter>, grid, block, 0, stream, h, rows, offsets + P::kLocalExperts,
                       ws.h_q, ws.h_scale);
      if (e != cudaSuccess) return fail(int(e), "quantize h: %s", cudaGetErrorString(e));
    }
    GemmParams g2{};
    g2.w = w.w2;
    g2.w_scales = w.w2_scales;
    g2.expert_scale = w.w2_expert_scale;
    g2.bias = w.b2;
    g2.act = P::kFp8Activations ? static_cast<const void*>(ws.h_q) : ws.h;
    g2.act_scale = ws.h_scale;
    g2.act_row = nullptr;
    g2.work_expert = r.work2_expert;
    g2.work_row0 = r.work2_row0;
    g2.work_row_end = r.work2_row_end;
    g2.num_work = r.num_work + 1;
    g2.row_weight = r.row_weight;
    g2.out = ws.y;
    g2.schedule_ready = 1;  // its schedule was complete before GEMM1 started
    if (by_expert) {
      g2.expert_row0 = r.offsets;
      if constexpr (P::kFp8Activations) {
        g2.progress_wait = r.quantized_rows;
        g2.progress_per_row = 1;
      } else {
        g2.progress_wait = r.expert_progress;
        g2.progress_per_row = 2ull * P::kInter;  // GEMM1's weight rows: gate and up per `h` column
      }
    }
    rc = reinterpret_cast<GemmLaunch>(gemm2.launch)(&g2, max_work_tiles(rows, gemm2.block_n, P::kLocalExperts), rows,
                                                    stream);
    if (rc) return fail(rc, "%s: %s", gemm2.name, cudaGetErrorString(cudaError_t(rc)));

    if (output == LayerOutput::kRows) {  // the rows the schedule made (offsets[E_local]), each to its output row
      const long max_vecs = rows * (P::kHidden / 8);
      const cudaError_t e = launch_pdl(store_rows_kernel<P, float>,
                                       dim3(int(max_vecs < 1024L * 256 ? (max_vecs + 255) / 256 : 1024)), dim3(256), 0,
                                       stream, static_cast<const int32_t*>(r.offsets),
                                       static_cast<const int32_t*>(r.counts), rp.batched_max_tokens_per_expert,
                                       static_cast<const int32_t*>(r.row_token), static_cast<const float*>(ws.y),
                                       static_cast<const float*>(nullptr), static_cast<__nv_bfloat16*>(out));
      if (e != cudaSuccess) return fail(int(e), "store rows: %s", cudaGetErrorString(e));
      return 0;
    }
    // Every GEMM1 CTA passes its pdl_wait on the routing kernel before it triggers, and GEMM2 (after
    // the quantizer's blocks, which launch after GEMM1's trigger) launches only after them, so the
    // routing has completed before finalize launches: it may read token_row before its wait.
    const long vecs = long(T) * (P::kHidden / 8);
    const cudaError_t e = launch_pdl(finalize_kernel<P>, dim3(int((vecs + 255) / 256)), dim3(256), 0, stream, T,
                                     static_cast<const int32_t*>(r.token_row), static_cast<const float*>(ws.y),
                                     static_cast<__nv_bfloat16*>(out));
    if (e != cudaSuccess) return fail(int(e), "finalize: %s", cudaGetErrorString(e));
    return 0;
  }
};

}  // namespace moegen
