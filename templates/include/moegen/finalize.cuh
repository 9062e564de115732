// The layer's last stage, arch-neutral: each token's top-k weighted GEMM2 rows summed back into
// token order.  Only the layer's translation unit includes this.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#include "moegen/pdl.cuh"

namespace moegen {

// out[t, :] = sum over the token's local slots, in slot order, of the weighted fp32 GEMM2 rows (zero
// if none): a token's sum depends on its own rows only, whatever else is in the batch.
// Its launcher (sm90/pipeline.cuh) guarantees that the routing kernel, which wrote token_row, completed
// before this kernel launched, so the rows are looked up before pdl_wait and only the GEMM2 rows'
// loads follow it: one L2 round trip less in the chain.  y is read from L2 (ld.cg), not through the
// non-coherent path that `const __restrict__` allows: GEMM2 is still writing it when this grid starts.
template <class P>
__global__ void finalize_kernel(int num_tokens, const int32_t* __restrict__ token_row,
                                const float* __restrict__ y, __nv_bfloat16* __restrict__ out) {
  constexpr int H = P::kHidden, VEC = 8, PER_ROW = H / VEC;  // H is a multiple of 32
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  const bool live = idx < num_tokens * PER_ROW;
  const int t = idx / PER_ROW, c = (idx % PER_ROW) * VEC;
  int rows[P::kTopK];
#pragma unroll
  for (int k = 0; k < P::kTopK; ++k) rows[k] = live ? __ldcg(token_row + t * P::kTopK + k) : -1;
  pdl_wait();  // y is GEMM2's output
  if (!live) return;
  float acc[VEC] = {};
#pragma unroll
  for (int k = 0; k < P::kTopK; ++k) {
    const int row = rows[k];
    if (row >= 0) {
      const float4* v = reinterpret_cast<const float4*>(y + size_t(row) * H + c);
      const float4 lo = __ldcg(v), hi = __ldcg(v + 1);
      const float b[VEC] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += b[j];
    }
  }
  uint4 o;
  __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
  for (int j = 0; j < VEC; ++j) ob[j] = __float2bfloat16(acc[j]);
  *reinterpret_cast<uint4*>(out + size_t(t) * H + c) = o;
}

// Rows [from, to) of local expert e's M output rows set to NaN: rows a count names that the schedule did
// not keep, so that misuse shows.
template <int H>
__device__ void nan_rows(__nv_bfloat16* __restrict__ out, int e, int max_tokens_per_expert, int from, int to) {
  constexpr int VEC = 8, PER_ROW = H / VEC;
  const uint4 nan = make_uint4(0x7FC07FC0u, 0x7FC07FC0u, 0x7FC07FC0u, 0x7FC07FC0u);
  for (long v = long(from) * PER_ROW + threadIdx.x; v < long(to) * PER_ROW; v += blockDim.x)
    *reinterpret_cast<uint4*>(out + (size_t(e) * max_tokens_per_expert + v / PER_ROW) * H + (v % PER_ROW) * VEC) = nan;
}

// A batched call of no tokens (num_tokens = 0) keeps no rows: every row a count names is NaN.
template <class P>
__global__ void nan_named_rows_kernel(const int32_t* __restrict__ counts, int max_tokens_per_expert,
                                      __nv_bfloat16* __restrict__ out) {
  for (int e = blockIdx.x; e < P::kLocalExperts; e += gridDim.x)
    nan_rows<P::kHidden>(out, e, max_tokens_per_expert, 0, min(max(__ldg(counts + e), 0), max_tokens_per_expert));
}

// The batched entry point's last stage: out[row_token[r], :] = GEMM2's row r for the offsets[E_local]
// local rows, plus the row's expert's bias where GEMM2 leaves it out (`bias`: SM100, whose GEMM2 writes
// plain bf16 rows; SM90 adds it, and the weight, 1 here, in its epilogue).  Rows a count names but the
// schedule dropped (counts[e], clamped, past the rows it kept: a num_tokens too small for the dispatch)
// are written as NaN, so that misuse shows; the other output rows are not written.  The grid strides over
// the rows the schedule made (their count is on the GPU).
template <class P, class Row>
__global__ void store_rows_kernel(const int32_t* __restrict__ offsets, const int32_t* __restrict__ counts,
                                  int max_tokens_per_expert, const int32_t* __restrict__ row_token,
                                  const Row* __restrict__ y, const float* __restrict__ bias,
                                  __nv_bfloat16* __restrict__ out) {
  constexpr int H = P::kHidden, VEC = 8, PER_ROW = H / VEC, E = P::kLocalExperts;
  pdl_wait();  // y is GEMM2's output
  if (__ldcg(offsets + E) < __ldcg(counts + E)) {  // rows were dropped: NaN in them, an expert per block
    for (int e = blockIdx.x; e < E; e += gridDim.x)
      nan_rows<H>(out, e, max_tokens_per_expert, __ldcg(offsets + e + 1) - __ldcg(offsets + e), __ldcg(counts + e));
  }
  const long vecs = long(__ldcg(offsets + E)) * PER_ROW;
  for (long idx = long(blockIdx.x) * blockDim.x + threadIdx.x; idx < vecs; idx += long(gridDim.x) * blockDim.x) {
    const int r = int(idx / PER_ROW), c = int(idx % PER_ROW) * VEC;
    float v[VEC];
    if constexpr (sizeof(Row) == 4) {
      const float4* p = reinterpret_cast<const float4*>(y + size_t(r) * H + c);
      const float4 lo = __ldcg(p), hi = __ldcg(p + 1);  // L2: GEMM2 wrote y while this grid ran
      const float b[VEC] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = b[j];
    } else {
      const uint4 p = __ldcg(reinterpret_cast<const uint4*>(y + size_t(r) * H + c));
      const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&p);
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = __bfloat162float(b[j]);
    }
    const int dst = __ldcg(row_token + r);  // e * M + i: expert e's row i
    if (bias) {
      const float* b = bias + size_t(dst / max_tokens_per_expert) * H + c;
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] += b[j];
    }
    uint4 o;
    __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
    for (int j = 0; j < VEC; ++j) ob[j] = __float2bfloat16(v[j]);
    *reinterpret_cast<uint4*>(out + size_t(dst) * H + c) = o;
  }
}

}  // namespace moegen

namespace moegen {

// out[t, :] = sum over the token's local slots of routing weight x (GEMM2 row + its expert's bias), in
// fp32: for archs whose GEMM2 writes plain rows (SM100).
template <class P>
__global__ void finalize_weighted_kernel(int num_tokens, const int32_t* __restrict__ token_row,
                                         const int32_t* __restrict__ local_expert,
                                         const float* __restrict__ row_weight, const __nv_bfloat16* __restrict__ y,
                                         const float* __restrict__ bias, __nv_bfloat16* __restrict__ out) {
  constexpr int H = P::kHidden, VEC = 8, PER_ROW = H / VEC;
  pdl_wait();
  const long idx = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= long(num_tokens) * PER_ROW) return;
  const int t = int(idx / PER_ROW), c = int(idx % PER_ROW) * VEC;
  float acc[VEC] = {};
#pragma unroll
  for (int k = 0; k < P::kTopK; ++k) {
    const int row = token_row[t * P::kTopK + k];
    if (row < 0) continue;
    const float w = row_weight[row];
    const uint4 v = *reinterpret_cast<const uint4*>(y + size_t(row) * H + c);
    const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&v);
    const float* bias_row = P::kBias2 ? bias + size_t(local_expert[t * P::kTopK + k]) * H + c : nullptr;
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] += w * (__bfloat162float(b[j]) + (P::kBias2 ? bias_row[j] : 0.f));
  }
  uint4 o;
  __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
  for (int j = 0; j < VEC; ++j) ob[j] = __float2bfloat16(acc[j]);
  *reinterpret_cast<uint4*>(out + size_t(t) * H + c) = o;
}

}  // namespace moegen
