// SM100's part of the layer after routing.  The tensor cores take MXFP8 x MXFP4 (BF16 is not a
// block-scaled operand), so the activations are quantized around the GEMMs:
//   gather + quantize the hidden rows (MXFP8) -> GEMM1 (CUTLASS, bf16 gate|up) -> SwiGLU + quantize
//   (MXFP8) -> GEMM2 (CUTLASS, bf16) -> finalize: routing weight and bias, sum per token in fp32.
// The quantizers and finalize are arch-neutral (quantize.cuh, finalize.cuh); the GEMMs are the GEMM
// units' `<name>_launch` (sm100/gemm_args.h).
#pragma once
#include <cutlass/cutlass.h>  // cutlass::Status and its names, for a launch's host-side failure

#include "moegen/activation.cuh"
#include "moegen/finalize.cuh"
#include "moegen/layer.cuh"
#include "moegen/quantize.cuh"
#include "moegen/sm100/gemm_args.h"

namespace moegen {

// GEMM2's activations: SwiGLU of GEMM1's bf16 gate|up rows (plus GEMM1's bias), 0 past the width.
template <class P>
struct SwigluRows {
  const __nv_bfloat16* gate_up;  // [rows, 2 I]: gate columns, then up columns
  const float* bias;             // [E_local, 2 I] or nullptr
  __device__ float operator()(int r, int e, int c) const {
    constexpr int I = P::kInter;
    if (c >= I) return 0.f;
    float gate = __bfloat162float(gate_up[long(r) * 2 * I + c]), up = __bfloat162float(gate_up[long(r) * 2 * I + I + c]);
    if constexpr (P::kBias13) {
      gate += bias[long(e) * 2 * I + c];
      up += bias[long(e) * 2 * I + I + c];
    }
    return activation<P>(gate, up);
  }
};

template <class P>
struct Pipeline {
  static constexpr int round128(int x) { return (x + 127) / 128 * 128; }
  static constexpr int kK1 = round128(P::kHidden), kK2 = round128(P::kInter);  // FP4 TMA: K % 128 == 0
  static constexpr int kN1 = 2 * P::kInter, kN2 = P::kHidden;
  static constexpr long kWeights1Bytes = long(round128(kN1)) * kK1 / 2, kWeights2Bytes = long(round128(kN2)) * kK2 / 2;
  static constexpr long kScales1Bytes = long(round128(kN1)) * kK1 / 32, kScales2Bytes = long(round128(kN2)) * kK2 / 32;
  static constexpr size_t kScratchBytes = sm100::scratch_bytes_bound(P::kLocalExperts);

  struct Workspace {
    RoutingWorkspace<P> routing;
    int32_t* sf_rows;        // [E_local + 1] each expert's scale rows, padded to 128
    uint8_t* a_q;            // [rows, kK1] e4m3
    uint8_t* a_sf;           // block-scaled scales of a_q
    __nv_bfloat16* gate_up;  // [rows, 2 I]
    uint8_t* h_q;            // [rows, kK2] e4m3
    uint8_t* h_sf;
    __nv_bfloat16* y;        // [rows, H]
    uint8_t* scratch1;       // GEMM1's and GEMM2's device arguments and CUTLASS workspaces
    uint8_t* scratch2;
  };

  // Nothing for the routing kernel to write: this pipeline quantizes its GEMMs' rows itself.
  static void bind_routing(RoutingParams&, const Workspace&, const void*) {}

  static size_t carve(Workspace* ws, uint8_t* base, int num_tokens) {
    Workspace dummy;
    Workspace& w = ws ? *ws : dummy;
    Carver c{base};
    const long rows = long(num_tokens) * P::kTopK;
    const long padded_rows = rows + 128L * P::kLocalExperts;  // every expert's rows rounded up to 128
    w.routing.carve(c, num_tokens);
    c.take(w.sf_rows, P::kLocalExperts + 1);
    c.take(w.a_q, size_t(rows) * kK1);
    c.take(w.a_sf, size_t(padded_rows) * (kK1 / 32));
    c.take(w.gate_up, size_t(rows) * kN1);
    c.take(w.h_q, size_t(rows) * kK2);
    c.take(w.h_sf, size_t(padded_rows) * (kK2 / 32));
    c.take(w.y, size_t(rows) * kN2);
    c.take(w.scratch1, kScratchBytes);
    c.take(w.scratch2, kScratchBytes);
    return c.bytes();
  }

  template <class Source>
  static int quantize(Source src, const Workspace& ws, long rows, int k_pad, uint8_t* q, uint8_t* sf,
                      cudaStream_t stream) {
    const long items = (rows + 128L * P::kLocalExperts) * (k_pad / 32);  // warps needed at most
    const long blocks = (items + 7) / 8;
    quantize_rows_kernel<Source, P::kLocalExperts><<<unsigned(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(
        src, ws.routing.offsets, ws.sf_rows, k_pad, q, sf);
    MOEGEN_CHECK_LAUNCH("quantize");
    return 0;
  }

  static int gemm(const KernelEntry& kernel, const Workspace& ws, int n_out, int k, const uint8_t* weights,
                  long weights_bytes, const uint8_t* weight_sf, long sf_bytes, const uint8_t* tokens,
                  const uint8_t* token_sf, __nv_bfloat16* out, uint8_t* scratch, cudaStream_t stream) {
    const sm100::GroupedGemmArgs a{P::kLocalExperts, n_out, k, weights, weights_bytes, weight_sf, sf_bytes, tokens,
                                   token_sf, ws.routing.offsets, ws.sf_rows, out, scratch, kScratchBytes};
    const int rc = reinterpret_cast<sm100::GemmLaunch>(kernel.launch)(&a, stream);
    if (rc < 0 && -rc % 1000 == 0) return fail(rc, "%s: %s", kernel.name, sm100::launch_step_name(rc));
    if (rc < 0)
      return fail(rc, "%s: %s (%s)", kernel.name, sm100::launch_step_name(rc),
                  cutlassGetStatusString(cutlass::Status(-rc % 1000)));
    return rc ? fail(rc, "%s: %s", kernel.name, cudaGetErrorString(cudaError_t(rc))) : 0;
  }

  static constexpr bool kBatched = true;

  static int run(const RoutingParams& rp, const Workspace& ws, const moegen_weights& w, const void* hidden, void* out,
                 const KernelEntry& gemm1, const KernelEntry& gemm2, LayerOutput output, cudaStream_t stream) {
    const RoutingWorkspace<P>& r = ws.routing;
    const int T = rp.num_tokens;
    const long rows = long(T) * P::kTopK;
    sf_rows_kernel<P::kLocalExperts><<<1, kWarpSize, 0, stream>>>(r.offsets, ws.sf_rows);
    MOEGEN_CHECK_LAUNCH("sf_rows");
    int rc = quantize(GatherRows{static_cast<const __nv_bfloat16*>(hidden), r.row_token, P::kHidden}, ws, rows, kK1,
                      ws.a_q, ws.a_sf, stream);
    if (!rc) rc = gemm(gemm1, ws, kN1, kK1, w.w13, kWeights1Bytes, w.w13_scales, kScales1Bytes, ws.a_q, ws.a_sf,
                       ws.gate_up, ws.scratch1, stream);
    if (!rc) rc = quantize(SwigluRows<P>{ws.gate_up, w.b13}, ws, rows, kK2, ws.h_q, ws.h_sf, stream);
    if (!rc) rc = gemm(gemm2, ws, kN2, kK2, w.w2, kWeights2Bytes, w.w2_scales, kScales2Bytes, ws.h_q, ws.h_sf, ws.y,
                       ws.scratch2, stream);
    if (rc) return rc;
    if (output == LayerOutput::kRows) {  // each row to its own output row, with its expert's bias (weight 1)
      const long max_vecs = rows * (P::kHidden / 8);
      store_rows_kernel<P, __nv_bfloat16><<<unsigned(max_vecs < 1024L * 256 ? (max_vecs + 255) / 256 : 1024), 256, 0,
                                            stream>>>(r.offsets, r.counts, rp.batched_max_tokens_per_expert,
                                                      r.row_token, ws.y, P::kBias2 ? w.b2 : nullptr,
                                                      static_cast<__nv_bfloat16*>(out));
      MOEGEN_CHECK_LAUNCH("store rows");
      return 0;
    }
    const long vecs = long(T) * (P::kHidden / 8);
    finalize_weighted_kernel<P><<<unsigned((vecs + 255) / 256), 256, 0, stream>>>(
        T, r.token_row, r.local_expert, r.row_weight, ws.y, w.b2, static_cast<__nv_bfloat16*>(out));
    MOEGEN_CHECK_LAUNCH("finalize");
    return 0;
  }
};

}  // namespace moegen
