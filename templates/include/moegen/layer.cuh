// Host orchestration of one MoE layer, arch-neutral: argument checks, the routing workspace and
// launches, and the entry points (fused, experts-only, batched).  What follows routing (the GEMMs,
// and whatever the arch needs around them) is the arch's Pipeline<P> (moegen/<arch>/pipeline.cuh,
// included after this by the layer's translation unit).  Everything runs on the caller's stream with
// no host synchronization and no allocation, so the whole layer can be captured in a CUDA graph.
#pragma once
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <type_traits>

#include "moegen/abi.h"
#include "moegen/finalize.cuh"  // the batched call of no tokens marks its named rows
#include "moegen/routing.cuh"

namespace moegen {

struct KernelEntry {
  const char* name;
  int gemm;            // 1 or 2
  int block_n;         // token rows per work tile: the schedule is built for it
  bool expert_progress;  // carries GemmParams::progress_add / progress_wait's code
  const void* launch;  // the kernel's launch function, of the type its arch's pipeline calls
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

#define MOEGEN_CHECK_LAUNCH(what)                                                              \
  do {                                                                                         \
    cudaError_t e_ = cudaGetLastError();                                                       \
    if (e_ != cudaSuccess) return fail(int(e_), "%s: %s", what, cudaGetErrorString(e_));       \
  } while (0)

constexpr int kMinBlockN = 8;

// Up to this many (token, slot) rows the last routing block scatters them itself: one launch less.
constexpr long kScatterInRoutingMaxRows = 4096;

// Worst-case work tiles for `rows` expert rows cut into tiles of bn rows.
inline int max_work_tiles(long rows, int bn, int experts) {
  long tiles = (rows + bn - 1) / bn + (rows < experts ? rows : experts);
  return int(tiles > 0 ? tiles : 1);
}

// Carves 256-byte aligned arrays out of one workspace (or, with base == nullptr, measures it).
struct Carver {
  uint8_t* base;
  size_t off = 0;
  template <class T>
  void take(T*& ptr, size_t count) {
    off = (off + 255) / 256 * 256;
    if (base) ptr = reinterpret_cast<T*>(base + off);
    off += count * sizeof(T);
  }
  size_t bytes() const { return (off + 255) / 256 * 256; }
};

// Routing's outputs: the permutation into expert order and both GEMMs' work tiles.
template <class P>
struct RoutingWorkspace {
  int32_t* counts;
  int32_t* offsets;
  int32_t* slot_in_expert;
  int32_t* local_expert;
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
  unsigned long long* expert_progress;
  unsigned long long* quantized_rows;  // W4A8 only, else nullptr

  void carve(Carver& c, int num_tokens) {
    const long rows = long(num_tokens) * P::kTopK;
    const int max_work = max_work_tiles(rows, kMinBlockN, P::kLocalExperts);
    c.take(counts, P::kLocalExperts + 1);  // + the routing blocks' done counter
    c.take(offsets, P::kLocalExperts + 1);
    c.take(slot_in_expert, rows);
    c.take(local_expert, rows);
    c.take(row_token, rows);
    c.take(row_weight, rows);
    c.take(token_row, rows);
    c.take(work1_expert, max_work);
    c.take(work1_row0, max_work);
    c.take(work1_row_end, max_work);
    c.take(work2_expert, max_work);
    c.take(work2_row0, max_work);
    c.take(work2_row_end, max_work);
    c.take(num_work, 2);
    c.take(expert_progress, P::kLocalExperts);
    quantized_rows = nullptr;
    if constexpr (P::kFp8Activations) c.take(quantized_rows, P::kLocalExperts);
  }

  // Points the routing's outputs (and the schedule's tile sizes) at these arrays.
  void bind(RoutingParams& rp, int bn1, int bn2) const {
    rp.counts = counts;
    rp.blocks_done = counts + P::kLocalExperts;
    rp.slot_in_expert = slot_in_expert;
    rp.local_expert = local_expert;
    rp.offsets = offsets;
    rp.bn1 = bn1;
    rp.bn2 = bn2;
    rp.work1_expert = work1_expert;
    rp.work1_row0 = work1_row0;
    rp.work1_row_end = work1_row_end;
    rp.work2_expert = work2_expert;
    rp.work2_row0 = work2_row0;
    rp.work2_row_end = work2_row_end;
    rp.num_work = num_work;
    rp.expert_progress = expert_progress;
    rp.quantized_rows = quantized_rows;
    rp.row_token = row_token;
    rp.row_weight = row_weight;
    rp.token_row = token_row;
  }
};

// What the layer's last stage writes: each token's weighted sum of its rows (the fused and experts-only
// entry points), or each expert row into the output row row_token names (the batched entry point).
enum class LayerOutput { kTokenSums, kRows };

// What follows routing, per arch: template <class P> struct Pipeline { struct Workspace (holding a
// RoutingWorkspace<P> `routing`); static size_t carve(Workspace*, uint8_t* base, int num_tokens);
// static void bind_routing(RoutingParams&, const Workspace&, const void* hidden) (what the routing
// kernel writes for it); static constexpr bool kBatched (it implements LayerOutput::kRows); static int run(const
// RoutingParams&, const Workspace&, const moegen_weights&, const void* hidden, void* out, const
// KernelEntry& gemm1, const KernelEntry& gemm2, LayerOutput, cudaStream_t); }.
template <class P>
struct Pipeline;

// Tokens per call: the kernels index expert rows (tokens x top_k) and finalize's 8-element vectors
// (tokens x hidden / 8) with 32-bit integers; half the range keeps every sum of them in range too.
template <class P>
constexpr int64_t kMaxTokens = int64_t(INT32_MAX / 2) / (P::kTopK > P::kHidden / 8 ? P::kTopK : P::kHidden / 8);

// 0 outside [0, kMaxTokens]: no caller can size a buffer from an overflowed count.
template <class P>
size_t workspace_bytes(int64_t num_tokens) {
  if (num_tokens < 0 || num_tokens > kMaxTokens<P>) return 0;
  return Pipeline<P>::carve(nullptr, nullptr, int(num_tokens));
}

// The batched entry point: E_local x M input and output rows, within the row and vector ranges
// kMaxTokens keeps; 0 where the build cannot take it (W4A8 quantizes the hidden rows per token in its
// routing, and the arch's pipeline may not implement it).
template <class P>
constexpr int64_t kMaxTokensPerExpert = P::kFp8Activations || !Pipeline<P>::kBatched ? 0
                                                                                      : kMaxTokens<P> / P::kLocalExperts;

// The batched entry point's rows are at most E_local x M and num_tokens x top_k: the pipeline (its
// workspace and grids) runs as for the fewest tokens whose (token, slot) rows cover that many.
inline int64_t batched_tokens(int64_t num_tokens, int64_t max_tokens_per_expert, int local_experts, int top_k) {
  const int64_t cover = (max_tokens_per_expert * local_experts + top_k - 1) / top_k;
  return num_tokens < cover ? num_tokens : cover;
}

template <class P>
size_t workspace_bytes_batched(int64_t num_tokens, int64_t max_tokens_per_expert) {
  if (kMaxTokensPerExpert<P> == 0 || max_tokens_per_expert < 0 || max_tokens_per_expert > kMaxTokensPerExpert<P> ||
      num_tokens < 0 || num_tokens > kMaxTokens<P>)
    return 0;
  return workspace_bytes<P>(batched_tokens(num_tokens, max_tokens_per_expert, P::kLocalExperts, P::kTopK));
}

// A tensor the call reads or writes when it has tokens: not NULL, and aligned to `alignment` bytes
// (hidden and out rows move in 16-byte vectors).  Returns 0, or fail()'s code.
inline int check_pointer(const char* name, const void* p, int alignment) {
  if (!p) return fail(-1, "%s: NULL", name);
  if (reinterpret_cast<uintptr_t>(p) % alignment)
    return fail(-1, "%s at %p: expected %d-byte alignment (the kernels' loads need it)", name, p, alignment);
  return 0;
}

// Checks shared by the entry points; carves `ws`.  Returns 0, or fail()'s code.
template <class P>
int check_call(int64_t num_tokens, const moegen_weights& w, void* workspace, size_t workspace_bytes_given,
               const KernelEntry* kernels, int num_kernels, int k1, int k2, typename Pipeline<P>::Workspace& ws) {
  if (num_tokens < 0 || num_tokens > kMaxTokens<P>)
    return fail(-1, "num_tokens = %lld: expected 0..%lld", (long long)num_tokens, (long long)kMaxTokens<P>);
  if (k1 < 0 || k1 >= num_kernels || kernels[k1].gemm != 1)
    return fail(-1, "gemm1_kernel = %d: expected the index of a gemm1 kernel (0..%d)", k1, num_kernels - 1);
  if (k2 < 0 || k2 >= num_kernels || kernels[k2].gemm != 2)
    return fail(-1, "gemm2_kernel = %d: expected the index of a gemm2 kernel (0..%d)", k2, num_kernels - 1);
  const int bn1 = kernels[k1].block_n, bn2 = kernels[k2].block_n;
  // the schedule divides by shifting; the workspace's work-tile arrays are sized for kMinBlockN
  if (bn1 < kMinBlockN || (bn1 & (bn1 - 1)) || bn2 < kMinBlockN || (bn2 & (bn2 - 1)))
    return fail(-1, "kernels %s / %s: block_n %d / %d, expected powers of two >= %d", kernels[k1].name,
                kernels[k2].name, bn1, bn2, kMinBlockN);
  if (!w.w13 || !w.w13_scales || !w.w13_expert_scale || !w.w2 || !w.w2_scales || !w.w2_expert_scale)
    return fail(-1, "weights: a weight, scale or expert-scale pointer is NULL");
  if ((P::kBias13 && !w.b13) || (P::kBias2 && !w.b2))
    return fail(-1, "this model has per-expert GEMM biases: b13 and b2 are required");
  const size_t need = workspace_bytes<P>(num_tokens);
  if (workspace_bytes_given < need || (reinterpret_cast<uintptr_t>(workspace) & 255))
    return fail(-1, "workspace: %zu bytes at %p; expected >= %zu bytes, 256-byte aligned", workspace_bytes_given,
                workspace, need);
  if (num_tokens > 0) Pipeline<P>::carve(&ws, static_cast<uint8_t*>(workspace), int(num_tokens));
  return 0;
}

// Routing (`Source`: the router or the caller's ids), the schedule and the permutation.
template <class P, class Source>
int run_routing(RoutingParams& rp, const RoutingWorkspace<P>& ws, int bn1, int bn2, cudaStream_t stream) {
  const int T = rp.num_tokens;
  const long rows = long(T) * P::kTopK;
  cudaError_t e = cudaSuccess;
  ws.bind(rp, bn1, bn2);
  rp.scatter_in_last_block = rows <= kScatterInRoutingMaxRows;
  if (T <= OneBlockRouting<P>::kMaxTokens) {  // decode: one block counts in shared memory
    route_one_block_kernel<P, Source><<<1, OneBlockRouting<P>::kWarps * kWarpSize, 0, stream>>>(rp);
  } else {
    zero_counters_kernel<P><<<1, 256, 0, stream>>>(ws.counts);
    MOEGEN_CHECK_LAUNCH("zero_counters");
    const dim3 grid(route_grid<P>(T)), block(kRouteWarps * kWarpSize);
    e = launch_pdl(route_kernel<P, Source>, grid, block, 0, stream, rp);
    if (e != cudaSuccess) return fail(int(e), "route: %s", cudaGetErrorString(e));
  }
  MOEGEN_CHECK_LAUNCH("route");
  if (!rp.scatter_in_last_block) {
    e = launch_pdl(scatter_kernel<P>, dim3(int((rows + 255) / 256)), dim3(256), 0, stream, rp);
    if (e != cudaSuccess) return fail(int(e), "scatter: %s", cudaGetErrorString(e));
  }
  return 0;
}

template <class P, class Source>
int run_layer(RoutingParams rp, const typename Pipeline<P>::Workspace& ws, const moegen_weights& w,
              const void* hidden, void* out, const KernelEntry& gemm1, const KernelEntry& gemm2, cudaStream_t stream) {
  Pipeline<P>::bind_routing(rp, ws, hidden);
  if (int rc = run_routing<P, Source>(rp, ws.routing, gemm1.block_n, gemm2.block_n, stream)) return rc;
  return Pipeline<P>::run(rp, ws, w, hidden, out, gemm1, gemm2, LayerOutput::kTokenSums, stream);
}

template <class P>
int forward(const moegen_args& a, const KernelEntry* kernels, int num_kernels, int k1, int k2,
            cudaStream_t stream) {
  typename Pipeline<P>::Workspace ws;
  if (int rc = check_call<P>(a.num_tokens, a.weights, a.workspace, a.workspace_bytes, kernels, num_kernels, k1, k2, ws))
    return rc;
  if (a.logits_dtype != MOEGEN_LOGITS_F32 && a.logits_dtype != MOEGEN_LOGITS_BF16)
    return fail(-1, "logits_dtype = %d: expected MOEGEN_LOGITS_F32 or MOEGEN_LOGITS_BF16", a.logits_dtype);
  if (P::kScoreBias && !a.score_bias)
    return fail(-1, "this router selects with a per-expert score bias: score_bias is required");
  if (a.reserved != 0) return fail(-1, "reserved = %d: expected 0", a.reserved);
  if (a.num_tokens == 0) return 0;
  if (int rc = check_pointer("hidden", a.hidden, 16)) return rc;
  if (int rc = check_pointer("out", a.out, 16)) return rc;
  if (int rc = check_pointer("router_logits", a.router_logits, a.logits_dtype == MOEGEN_LOGITS_F32 ? 4 : 2)) return rc;
  if (int rc = check_pointer("topk_ids", a.topk_ids, 4)) return rc;
  if (int rc = check_pointer("topk_weights", a.topk_weights, 4)) return rc;
  RoutingParams rp{};
  rp.logits = a.router_logits;
  rp.score_bias = a.score_bias;
  rp.num_tokens = int(a.num_tokens);
  rp.topk_ids = a.topk_ids;
  rp.topk_weights = a.topk_weights;
  rp.slot_weight = a.topk_weights;
  return a.logits_dtype == MOEGEN_LOGITS_F32
             ? run_layer<P, FromLogits<float>>(rp, ws, a.weights, a.hidden, a.out, kernels[k1], kernels[k2], stream)
             : run_layer<P, FromLogits<__nv_bfloat16>>(rp, ws, a.weights, a.hidden, a.out, kernels[k1], kernels[k2],
                                                       stream);
}

template <class P>
int forward_experts(const moegen_experts_args& a, const KernelEntry* kernels, int num_kernels, int k1, int k2,
                    cudaStream_t stream) {
  typename Pipeline<P>::Workspace ws;
  if (int rc = check_call<P>(a.num_tokens, a.weights, a.workspace, a.workspace_bytes, kernels, num_kernels, k1, k2, ws))
    return rc;
  if (a.ids_dtype != MOEGEN_IDS_I32 && a.ids_dtype != MOEGEN_IDS_I64)
    return fail(-1, "ids_dtype = %d: expected MOEGEN_IDS_I32 or MOEGEN_IDS_I64", a.ids_dtype);
  if (a.reserved != 0) return fail(-1, "reserved = %d: expected 0", a.reserved);
  if (a.num_tokens == 0) return 0;
  if (int rc = check_pointer("hidden", a.hidden, 16)) return rc;
  if (int rc = check_pointer("out", a.out, 16)) return rc;
  if (int rc = check_pointer("topk_ids", a.topk_ids, a.ids_dtype == MOEGEN_IDS_I32 ? 4 : 8)) return rc;
  if (int rc = check_pointer("topk_weights", a.topk_weights, 4)) return rc;
  RoutingParams rp{};
  rp.ids_in = a.topk_ids;
  rp.weights_in = a.topk_weights;
  rp.expert_map = a.expert_map;
  rp.num_tokens = int(a.num_tokens);
  rp.slot_weight = a.topk_weights;
  return a.ids_dtype == MOEGEN_IDS_I32
             ? run_layer<P, FromIds<int32_t>>(rp, ws, a.weights, a.hidden, a.out, kernels[k1], kernels[k2], stream)
             : run_layer<P, FromIds<int64_t>>(rp, ws, a.weights, a.hidden, a.out, kernels[k1], kernels[k2], stream);
}

template <class P>
int forward_batched(const moegen_batched_args& a, const KernelEntry* kernels, int num_kernels, int k1, int k2,
                    cudaStream_t stream) {
  const int64_t M = a.max_tokens_per_expert;
  if (kMaxTokensPerExpert<P> == 0)
    return fail(-1, "this build takes no batched calls: %s", P::kFp8Activations ? "W4A8 quantizes its hidden rows per "
                "token in the routing (use moegen_forward_experts)" : "its arch's pipeline does not implement them");
  if (M < 0 || M > kMaxTokensPerExpert<P>)
    return fail(-1, "max_tokens_per_expert = %lld: expected 0..%lld", (long long)M, (long long)kMaxTokensPerExpert<P>);
  if (a.num_tokens < 0 || a.num_tokens > kMaxTokens<P>)
    return fail(-1, "num_tokens = %lld: expected 0..%lld", (long long)a.num_tokens, (long long)kMaxTokens<P>);
  const int T = int(batched_tokens(a.num_tokens, M, P::kLocalExperts, P::kTopK));
  typename Pipeline<P>::Workspace ws;  // that of T tokens: workspace_bytes_batched(num_tokens, M)
  if (int rc = check_call<P>(T, a.weights, a.workspace, a.workspace_bytes, kernels, num_kernels, k1, k2, ws)) return rc;
  if (!a.expert_num_tokens) return fail(-1, "expert_num_tokens: NULL");
  if (M > 0) {  // rows to read and write, or to fill with NaN
    if (int rc = check_pointer("hidden", a.hidden, 16)) return rc;
    if (int rc = check_pointer("out", a.out, 16)) return rc;
  }
  if (T == 0) {  // no tokens (or M = 0, where the counts clamp to 0): the rows the counts name are past the bound
    if (M > 0) {
      nan_named_rows_kernel<P><<<P::kLocalExperts, 256, 0, stream>>>(a.expert_num_tokens, int(M),
                                                                     static_cast<__nv_bfloat16*>(a.out));
      MOEGEN_CHECK_LAUNCH("NaN in the named rows");
    }
    return 0;
  }
  RoutingParams rp{};
  rp.num_tokens = T;  // the pipeline sizes its grids for T x top_k rows
  rp.batched_max_tokens_per_expert = int(M);
  ws.routing.bind(rp, kernels[k1].block_n, kernels[k2].block_n);
  schedule_batched_kernel<P><<<1, kBatchedScheduleThreads, 0, stream>>>(rp, a.expert_num_tokens,
                                                                        int(int64_t(T) * P::kTopK));
  MOEGEN_CHECK_LAUNCH("schedule_batched");
  return Pipeline<P>::run(rp, ws, a.weights, a.hidden, a.out, kernels[k1], kernels[k2], LayerOutput::kRows, stream);
}

// moegen_struct_layout: each struct's size and its fields' offsets, from the compiler.
inline const char* struct_layout(const char* name) {
#define MOEGEN_FIELD_OFFSET(f) s += std::string(#f "@") + std::to_string(offsetof(Struct, f)) + ",";
#define MOEGEN_LAYOUT(S, FIELDS)                        \
  [] {                                                  \
    using Struct = S;                                   \
    std::string s = std::to_string(sizeof(S)) + ";";    \
    FIELDS(MOEGEN_FIELD_OFFSET)                         \
    return s;                                           \
  }()
  static const std::string weights = MOEGEN_LAYOUT(moegen_weights, MOEGEN_WEIGHTS_FIELDS);
  static const std::string args = MOEGEN_LAYOUT(moegen_args, MOEGEN_ARGS_FIELDS);
  static const std::string experts = MOEGEN_LAYOUT(moegen_experts_args, MOEGEN_EXPERTS_ARGS_FIELDS);
  static const std::string batched = MOEGEN_LAYOUT(moegen_batched_args, MOEGEN_BATCHED_ARGS_FIELDS);
#undef MOEGEN_LAYOUT
#undef MOEGEN_FIELD_OFFSET
  if (!name) return nullptr;
  if (strcmp(name, "moegen_weights") == 0) return weights.c_str();
  if (strcmp(name, "moegen_args") == 0) return args.c_str();
  if (strcmp(name, "moegen_experts_args") == 0) return experts.c_str();
  if (strcmp(name, "moegen_batched_args") == 0) return batched.c_str();
  return nullptr;
}

}  // namespace moegen
