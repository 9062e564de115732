// Plain C ABI of a moegen library: no libtorch link, so one build serves any PyTorch version.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOEGEN_ABI_VERSION 1

// Logits dtypes accepted by the router.
#define MOEGEN_LOGITS_F32 0
#define MOEGEN_LOGITS_BF16 1

typedef struct moegen_args {
  int32_t num_tokens;
  int32_t logits_dtype;           // MOEGEN_LOGITS_*
  const void* hidden;             // bf16 [T, hidden]
  const void* router_logits;      // f32|bf16 [T, num_experts] (all experts, not just the local ones)
  const float* score_bias;        // f32 [num_experts], or NULL when the router takes none
  // Prepared weights (moegen.prepare), local experts only.
  const uint8_t* w13;             // e2m1 atoms  [E_local, N13_pad/64, H_pad/64, 2048]
  const uint8_t* w13_scales;      // e8m0 atoms  [E_local, N13_pad/64, H_pad/64, 128]
  const float* w13_expert_scale;  // f32 [E_local]: 2^shift folded out of the e8m0 scales
  const float* b13;               // f32 [E_local, 2*I_local] (gate then up), or NULL
  const uint8_t* w2;
  const uint8_t* w2_scales;
  const float* w2_expert_scale;
  const float* b2;                // f32 [E_local, hidden], or NULL
  void* out;                      // bf16 [T, hidden]
  int32_t* topk_ids;              // [T, top_k] global expert ids (output)
  float* topk_weights;            // [T, top_k] routing weights (output)
  void* workspace;                // moegen_workspace_bytes(T) bytes, 256-byte aligned
  size_t workspace_bytes;
} moegen_args;

// 0 on success; otherwise an error code and moegen_last_error() says what went wrong.
int moegen_forward(const moegen_args* args, int gemm1_kernel, int gemm2_kernel, void* stream);
size_t moegen_workspace_bytes(int32_t num_tokens);
const char* moegen_last_error(void);
int moegen_abi_version(void);
int moegen_num_kernels(void);
const char* moegen_kernel_name(int index);
// JSON text baked in at build time: spec, kernel list, fingerprint.
const char* moegen_build_info(void);

#ifdef __cplusplus
}
#endif
