// Plain C ABI of a moegen library: no libtorch link, so one build serves any PyTorch version.
// The runtime checks its ctypes mirror of these structs against moegen_struct_layout() at load.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOEGEN_ABI_VERSION 3

// Logits dtypes accepted by the router.
#define MOEGEN_LOGITS_F32 0
#define MOEGEN_LOGITS_BF16 1
// Expert id dtypes accepted by the experts-only entry point.
#define MOEGEN_IDS_I32 0
#define MOEGEN_IDS_I64 1

// Prepared weights (moegen.prepare, in the layout the manifest names), local experts only.
typedef struct moegen_weights {
  const uint8_t* w13;             // W1|W3 value atoms
  const uint8_t* w13_scales;      // W1|W3 scale atoms
  const float* w13_expert_scale;  // f32 [E_local]: 2^shift folded out of the e8m0 scales
  const float* b13;               // f32 [E_local, 2*I_local] (gate then up), or NULL
  const uint8_t* w2;
  const uint8_t* w2_scales;
  const float* w2_expert_scale;
  const float* b2;                // f32 [E_local, hidden], or NULL
} moegen_weights;

// The fused layer: routing from the router's logits, then the experts.
typedef struct moegen_args {
  int64_t num_tokens;             // at most moegen_max_tokens()
  int32_t logits_dtype;           // MOEGEN_LOGITS_*
  int32_t reserved;               // 0
  const void* hidden;             // bf16 [T, hidden], 16-byte aligned (as out)
  const void* router_logits;      // f32|bf16 [T, num_experts] (all experts, not just the local ones)
  const float* score_bias;        // f32 [num_experts], or NULL when the router takes none
  moegen_weights weights;
  void* out;                      // bf16 [T, hidden]
  int32_t* topk_ids;              // [T, top_k] global expert ids (output)
  float* topk_weights;            // [T, top_k] routing weights (output)
  void* workspace;                // moegen_workspace_bytes(T) bytes, 256-byte aligned
  size_t workspace_bytes;
} moegen_args;

// The experts only, on the caller's routing (serving engines route, and move tokens between ranks,
// themselves): out[t] = sum over k of topk_weights[t, k] * expert(topk_ids[t, k])(hidden[t]) over the
// slots whose expert is on this rank (the others add zero).
typedef struct moegen_experts_args {
  int64_t num_tokens;             // at most moegen_max_tokens()
  int32_t ids_dtype;              // MOEGEN_IDS_*
  int32_t reserved;               // 0
  const void* hidden;             // bf16 [T, hidden], 16-byte aligned (as out)
  const void* topk_ids;           // int32|int64 [T, top_k] global expert ids
  const float* topk_weights;      // f32 [T, top_k]
  const int32_t* expert_map;      // int32 [num_experts]: global id -> local id, -1 if not on this rank;
                                  // NULL: this build's contiguous range of experts
  moegen_weights weights;
  void* out;                      // bf16 [T, hidden]
  void* workspace;                // moegen_workspace_bytes(T) bytes, 256-byte aligned
  size_t workspace_bytes;
} moegen_experts_args;

// The experts only, in the batched layout of a low-latency expert-parallel dispatch (DeepEP's; vLLM's
// BatchedExperts format): rows [0, expert_num_tokens[e]) of hidden[e] were sent to local expert e, and
// out[e, i] = expert(e)(hidden[e, i]) for those rows, unweighted (the combine applies the routing
// weights; GEMM2's bias is added).  Rows from expert_num_tokens[e] on are neither read nor written.
// The counts live on the GPU, so no host check is possible: each is clamped to [0, M], and the rows past
// num_tokens x top_k in expert order (more than a dispatch of num_tokens tokens can carry: num_tokens was
// too small) are not computed and come back NaN.
typedef struct moegen_batched_args {
  int64_t num_tokens;                // tokens the dispatch carried over all ranks: at most num_tokens x top_k rows
  int64_t max_tokens_per_expert;     // M: hidden and out are [E_local, M, hidden]
  const void* hidden;                // bf16 [E_local, M, hidden], 16-byte aligned (as out)
  const int32_t* expert_num_tokens;  // int32 [E_local]
  moegen_weights weights;
  void* out;                         // bf16 [E_local, M, hidden]
  void* workspace;                   // moegen_workspace_bytes_batched(num_tokens, M) bytes, 256-byte aligned
  size_t workspace_bytes;
} moegen_batched_args;

// 0 on success; otherwise an error code and moegen_last_error() says what went wrong.
int moegen_forward(const moegen_args* args, int gemm1_kernel, int gemm2_kernel, void* stream);
int moegen_forward_experts(const moegen_experts_args* args, int gemm1_kernel, int gemm2_kernel, void* stream);
int moegen_forward_batched(const moegen_batched_args* args, int gemm1_kernel, int gemm2_kernel, void* stream);
// Workspace bytes for num_tokens tokens; 0 when num_tokens is outside [0, moegen_max_tokens()].
size_t moegen_workspace_bytes(int64_t num_tokens);
// Workspace bytes of the batched entry point; 0 when num_tokens is outside [0, moegen_max_tokens()], M
// outside [0, moegen_max_tokens_per_expert()], or the build takes no batched calls (W4A8).
size_t moegen_workspace_bytes_batched(int64_t num_tokens, int64_t max_tokens_per_expert);
int64_t moegen_max_tokens_per_expert(void);
// The most tokens one call takes (the kernels index rows with 32-bit integers).
int64_t moegen_max_tokens(void);
const char* moegen_last_error(void);
int moegen_abi_version(void);
int moegen_num_kernels(void);
const char* moegen_kernel_name(int index);
// "size;field@offset,field@offset,..." of moegen_weights, moegen_args, moegen_experts_args or
// moegen_batched_args (by name), NULL for any other name.
const char* moegen_struct_layout(const char* struct_name);
// JSON text baked in at build time: spec, kernel list, fingerprint.
const char* moegen_build_info(void);

#ifdef __cplusplus
}

// The fields of each struct, in order, for moegen_struct_layout.
#define MOEGEN_WEIGHTS_FIELDS(X) X(w13) X(w13_scales) X(w13_expert_scale) X(b13) X(w2) X(w2_scales) \
  X(w2_expert_scale) X(b2)
#define MOEGEN_ARGS_FIELDS(X) X(num_tokens) X(logits_dtype) X(reserved) X(hidden) X(router_logits) \
  X(score_bias) X(weights) X(out) X(topk_ids) X(topk_weights) X(workspace) X(workspace_bytes)
#define MOEGEN_EXPERTS_ARGS_FIELDS(X) X(num_tokens) X(ids_dtype) X(reserved) X(hidden) X(topk_ids) \
  X(topk_weights) X(expert_map) X(weights) X(out) X(workspace) X(workspace_bytes)
#define MOEGEN_BATCHED_ARGS_FIELDS(X) X(num_tokens) X(max_tokens_per_expert) X(hidden) X(expert_num_tokens) X(weights) X(out) \
  X(workspace) X(workspace_bytes)
#endif
