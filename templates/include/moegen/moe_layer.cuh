// Host orchestration of one MoE layer: workspace carving, argument checks and the launch sequence.
// Everything runs on the caller's stream with no host synchronization and no allocation, so the
// whole layer can be captured in a CUDA graph.
#pragma once
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#include "moegen/abi.h"
#include "moegen/gemm_params.cuh"
#include "moegen/moe_routing.cuh"

namespace moegen {

typedef int (*GemmLaunch)(const sm90::GemmParams*, int max_work, int persistent, cudaStream_t);

struct KernelEntry {
  const char* name;
  int gemm;      // 1 or 2
  int block_n;   // token rows per work tile: the schedule is built for it
  GemmLaunch launch;
};

inline char* error_buffer() {
  static thread_local char buf[512];
  return buf;
}
inline const char* last_error() { return error_buffer(); }
inline int fail(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_buffer(), 512, fmt, ap);
  va_end(ap);
  return code;
}

constexpr int kMinBlockN = 8;

// GEMM grids are persistent (as many CTAs as fit, each running a strided list of tiles) from this
// many expert rows (tokens x top_k) up, one CTA per tile below.  H200, deepseek-v4-flash, the same
// tuned kernels in both modes: persistent 1313 / 3393 / 9580 us at T = 1024 / 4096 / 16384 against
// 1500 / 3549 / 9602; at T <= 256 one CTA per tile was as fast or faster (T = 4: 105 against 115 us).
constexpr long kPersistentGridMinRows = 4096;

// MOEGEN_GRID=tiles | persistent overrides the choice (a switch for benchmarking the two).
inline int grid_override() {
  static const int mode = [] {
    const char* v = getenv("MOEGEN_GRID");
    if (v && strcmp(v, "tiles") == 0) return 0;
    if (v && strcmp(v, "persistent") == 0) return 1;
    return -1;
  }();
  return mode;
}
inline bool persistent_gemm_grid(long rows) {
  const int mode = grid_override();
  return mode >= 0 ? mode == 1 : rows >= kPersistentGridMinRows;
}
// Up to this many (token, slot) rows the last routing block scatters them itself: one launch less.
constexpr long kScatterInRoutingMaxRows = 4096;

// Worst-case work tiles for `rows` expert rows cut into tiles of bn rows.
inline int max_work_tiles(long rows, int bn, int experts) {
  long tiles = (rows + bn - 1) / bn + (rows < experts ? rows : experts);
  return int(tiles > 0 ? tiles : 1);
}

template <class P>
struct Workspace {
  int32_t* counts;
  int32_t* offsets;
  int32_t* slot_in_expert;
  int32_t* row_token;
  float* row_weight;
  int32_t* token_row;
  int32_t* work1_expert;
  int32_t* work1_row0;
  int32_t* work1_row_end;
  int32_t* work2_expert;
  int32_t* work2_row0;
  int32_t* work2_row_end;
  int32_t* num_work;
  __nv_bfloat16* h;  // [rows, I] SwiGLU output in expert order
  __nv_bfloat16* y;  // [rows, H] weighted GEMM2 output in expert order

  // Carves (or, with base == nullptr, measures) the workspace for num_tokens tokens.
  static size_t carve(Workspace* ws, uint8_t* base, int num_tokens) {
    const long rows = long(num_tokens) * P::kTopK;
    const int max_work = max_work_tiles(rows, kMinBlockN, P::kLocalExperts);
    size_t off = 0;
    auto take = [&](auto*& ptr, size_t count) {
      using T = std::remove_reference_t<decltype(*ptr)>;
      off = (off + 255) / 256 * 256;
      if (base) ptr = reinterpret_cast<T*>(base + off);
      off += count * sizeof(T);
    };
    Workspace dummy;
    Workspace& w = ws ? *ws : dummy;
    take(w.counts, P::kLocalExperts + 1);  // + the routing blocks' done counter
    take(w.offsets, P::kLocalExperts + 1);
    take(w.slot_in_expert, rows);
    take(w.row_token, rows);
    take(w.row_weight, rows);
    take(w.token_row, rows);
    take(w.work1_expert, max_work);
    take(w.work1_row0, max_work);
    take(w.work1_row_end, max_work);
    take(w.work2_expert, max_work);
    take(w.work2_row0, max_work);
    take(w.work2_row_end, max_work);
    take(w.num_work, 2);
    take(w.h, size_t(rows) * P::kInter);
    take(w.y, size_t(rows) * P::kHidden);
    return (off + 255) / 256 * 256;
  }
  static size_t bytes(int num_tokens) { return carve(nullptr, nullptr, num_tokens); }
};

#define MOEGEN_CHECK_LAUNCH(what)                                                              \
  do {                                                                                         \
    cudaError_t e_ = cudaGetLastError();                                                       \
    if (e_ != cudaSuccess) return fail(int(e_), "%s: %s", what, cudaGetErrorString(e_));       \
  } while (0)

template <class P>
int forward(const moegen_args& a, const KernelEntry* kernels, int num_kernels, int k1, int k2,
            cudaStream_t stream) {
  if (a.num_tokens < 0) return fail(-1, "num_tokens = %d: expected >= 0", a.num_tokens);
  if (k1 < 0 || k1 >= num_kernels || kernels[k1].gemm != 1)
    return fail(-1, "gemm1_kernel = %d: expected the index of a gemm1 kernel (0..%d)", k1, num_kernels - 1);
  if (k2 < 0 || k2 >= num_kernels || kernels[k2].gemm != 2)
    return fail(-1, "gemm2_kernel = %d: expected the index of a gemm2 kernel (0..%d)", k2, num_kernels - 1);
  if (a.logits_dtype != MOEGEN_LOGITS_F32 && a.logits_dtype != MOEGEN_LOGITS_BF16)
    return fail(-1, "logits_dtype = %d: expected MOEGEN_LOGITS_F32 or MOEGEN_LOGITS_BF16", a.logits_dtype);
  if ((P::kBias13 && !a.b13) || (P::kBias2 && !a.b2))
    return fail(-1, "this model has per-expert GEMM biases: b13 and b2 are required");
  if (P::kScoreBias && !a.score_bias)
    return fail(-1, "this router selects with a per-expert score bias: score_bias is required");
  const size_t need = Workspace<P>::bytes(a.num_tokens);
  if (a.workspace_bytes < need || (reinterpret_cast<uintptr_t>(a.workspace) & 255))
    return fail(-1, "workspace: %zu bytes at %p; expected >= %zu bytes, 256-byte aligned", a.workspace_bytes,
                a.workspace, need);
  if (a.num_tokens == 0) return 0;

  Workspace<P> ws;
  Workspace<P>::carve(&ws, static_cast<uint8_t*>(a.workspace), a.num_tokens);
  const int T = a.num_tokens;
  const long rows = long(T) * P::kTopK;

  cudaError_t e = cudaSuccess;
  const int bn1 = kernels[k1].block_n, bn2 = kernels[k2].block_n;
  if (bn1 <= 0 || (bn1 & (bn1 - 1)) || bn2 <= 0 || (bn2 & (bn2 - 1)))  // the schedule divides by shifting
    return fail(-1, "kernels %s / %s: block_n %d / %d, expected powers of two", kernels[k1].name, kernels[k2].name,
                bn1, bn2);
  RoutingParams rp{};
  rp.logits = a.router_logits;
  rp.score_bias = a.score_bias;
  rp.num_tokens = T;
  rp.topk_ids = a.topk_ids;
  rp.topk_weights = a.topk_weights;
  rp.counts = ws.counts;
  rp.blocks_done = ws.counts + P::kLocalExperts;
  rp.slot_in_expert = ws.slot_in_expert;
  rp.offsets = ws.offsets;
  rp.bn1 = bn1;
  rp.bn2 = bn2;
  rp.work1_expert = ws.work1_expert;
  rp.work1_row0 = ws.work1_row0;
  rp.work1_row_end = ws.work1_row_end;
  rp.work2_expert = ws.work2_expert;
  rp.work2_row0 = ws.work2_row0;
  rp.work2_row_end = ws.work2_row_end;
  rp.num_work = ws.num_work;
  rp.row_token = ws.row_token;
  rp.row_weight = ws.row_weight;
  rp.token_row = ws.token_row;
  rp.scatter_in_last_block = rows <= kScatterInRoutingMaxRows;
  const bool f32_logits = a.logits_dtype == MOEGEN_LOGITS_F32;
  if (T <= OneBlockRouting<P>::kMaxTokens) {  // decode: one block counts in shared memory
    const dim3 block(OneBlockRouting<P>::kWarps * kWarpSize);
    if (f32_logits) route_one_block_kernel<P, float><<<1, block, 0, stream>>>(rp);
    else route_one_block_kernel<P, __nv_bfloat16><<<1, block, 0, stream>>>(rp);
  } else {
    zero_counters_kernel<P><<<1, 256, 0, stream>>>(ws.counts);
    MOEGEN_CHECK_LAUNCH("zero_counters");
    const dim3 grid((T + kRouteWarps - 1) / kRouteWarps), block(kRouteWarps * kWarpSize);
    e = f32_logits ? launch_pdl(route_kernel<P, float>, grid, block, 0, stream, rp)
                   : launch_pdl(route_kernel<P, __nv_bfloat16>, grid, block, 0, stream, rp);
    if (e != cudaSuccess) return fail(int(e), "route: %s", cudaGetErrorString(e));
  }
  MOEGEN_CHECK_LAUNCH("route");
  if (!rp.scatter_in_last_block) {
    e = launch_pdl(scatter_kernel<P>, dim3(int((rows + 255) / 256)), dim3(256), 0, stream, rp);
    if (e != cudaSuccess) return fail(int(e), "scatter: %s", cudaGetErrorString(e));
  }

  sm90::GemmParams g1{};
  g1.w = a.w13;
  g1.w_scales = a.w13_scales;
  g1.expert_scale = a.w13_expert_scale;
  g1.bias = a.b13;
  g1.act = static_cast<const __nv_bfloat16*>(a.hidden);
  g1.act_row = ws.row_token;  // gather fused into the B-operand loads
  g1.work_expert = ws.work1_expert;
  g1.work_row0 = ws.work1_row0;
  g1.work_row_end = ws.work1_row_end;
  g1.num_work = ws.num_work;
  g1.out = ws.h;
  g1.schedule_ready = 0;  // follows the kernel that wrote the schedule and the permutation
  int rc = kernels[k1].launch(&g1, max_work_tiles(rows, bn1, P::kLocalExperts), persistent_gemm_grid(rows), stream);
  if (rc) return fail(rc, "%s: %s", kernels[k1].name, cudaGetErrorString(cudaError_t(rc)));

  sm90::GemmParams g2{};
  g2.w = a.w2;
  g2.w_scales = a.w2_scales;
  g2.expert_scale = a.w2_expert_scale;
  g2.bias = a.b2;
  g2.act = ws.h;
  g2.act_row = nullptr;
  g2.work_expert = ws.work2_expert;
  g2.work_row0 = ws.work2_row0;
  g2.work_row_end = ws.work2_row_end;
  g2.num_work = ws.num_work + 1;
  g2.row_weight = ws.row_weight;
  g2.out = ws.y;
  g2.schedule_ready = 1;  // its schedule was complete before GEMM1 started
  rc = kernels[k2].launch(&g2, max_work_tiles(rows, bn2, P::kLocalExperts), persistent_gemm_grid(rows), stream);
  if (rc) return fail(rc, "%s: %s", kernels[k2].name, cudaGetErrorString(cudaError_t(rc)));

  const long vecs = long(T) * (P::kHidden / 8);
  e = launch_pdl(finalize_kernel<P>, dim3(int((vecs + 255) / 256)), dim3(256), 0, stream, T,
                 static_cast<const int32_t*>(ws.token_row), static_cast<const __nv_bfloat16*>(ws.y),
                 static_cast<__nv_bfloat16*>(a.out));
  if (e != cudaSuccess) return fail(int(e), "finalize: %s", cudaGetErrorString(e));
  return 0;
}

}  // namespace moegen
