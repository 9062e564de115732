// The MoE layer's non-GEMM stages and the GEMM epilogues, specialized by a `Problem` struct of
// compile-time constants that moegen renders from the model spec:
//   route (scores, selection, weights, per-expert counts) -> schedule (offsets, GEMM work tiles)
//   -> scatter (permutation) -> GEMM1 + SwiGLU epilogue -> GEMM2 + routing-weight epilogue
//   -> finalize (sum of each token's top-k rows back into token order).
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

#include "moegen/sm90_mxfp4_grouped_gemm.cuh"

namespace moegen {

enum RouterKind { kSigmoidGroupTopK = 0, kSoftmaxTopK = 1, kTopKSoftmax = 2 };
enum GroupScore { kGroupMax = 0, kGroupTop2Sum = 1 };
enum ActivationKind { kSwiGLU = 0, kSwiGLUOai = 1 };

constexpr int kWarpSize = 32;

struct RoutingParams {
  const void* logits;
  const float* score_bias;
  int num_tokens;
  int32_t* topk_ids;        // [T, K]
  float* topk_weights;      // [T, K]
  int32_t* counts;          // [E_local] zeroed before the launch
  int32_t* blocks_done;     // [1] zeroed before the launch
  int32_t* slot_in_expert;  // [T, K]
  int32_t* offsets;         // [E_local + 1]
  int bn1, bn2;             // token rows per GEMM1 / GEMM2 work tile
  int32_t* work1_expert;
  int32_t* work1_row0;
  int32_t* work2_expert;
  int32_t* work2_row0;
  int32_t* num_work;        // [2]
  int32_t* row_token;       // [rows] permuted row -> token
  float* row_weight;        // [rows]
  int32_t* token_row;       // [T, K] -> permuted row or -1
  int scatter_in_last_block;  // small batches: the last routing block also scatters (one launch less)
};

__device__ __forceinline__ float load_logit(const float* p) { return *p; }
__device__ __forceinline__ float load_logit(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// Warp-wide argmax of (value, index); ties go to the lower index so selection is deterministic.
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, off);
    int oi = __shfl_xor_sync(0xffffffffu, i, off);
    if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
  }
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// What lane k < K of a routing warp chose for its token: expert, combine weight, and its slot among
// the expert's rows (-1 when the expert lives on another EP rank).
struct Choice {
  int expert;
  float weight;
  int slot;
};

// One warp per token. Lane l holds experts l, l+32, ...; selection is top_k rounds of argmax.
// `counts` may be global (many routing blocks) or shared memory (one block): a generic atomic.
template <class P, class LogitT>
__device__ Choice route_token(const RoutingParams& rp, int t, int warp, int lane, float (*group_sel)[P::kExperts],
                              int32_t* counts) {
  constexpr int E = P::kExperts, PER_LANE = (E + kWarpSize - 1) / kWarpSize, K = P::kTopK;
  constexpr float kNegInf = -INFINITY;
  const LogitT* __restrict__ logits = static_cast<const LogitT*>(rp.logits);
  const float* __restrict__ score_bias = rp.score_bias;

  float sel[PER_LANE], weight_src[PER_LANE];  // selection key, and the value the weight is made from
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    int e = lane + i * kWarpSize;
    float l = e < E ? load_logit(logits + size_t(t) * E + e) : kNegInf;
    sel[i] = l;
    weight_src[i] = l;
    if constexpr (P::kRouter == kSigmoidGroupTopK) {
      if (e < E) {
        float s = 1.0f / (1.0f + expf(-l));
        weight_src[i] = s;
        sel[i] = P::kScoreBias ? s + score_bias[e] : s;
      }
    }
  }
  if constexpr (P::kRouter == kSoftmaxTopK) {  // probabilities over all experts
    float m = kNegInf;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) m = fmaxf(m, sel[i]);
    m = warp_max(m);
    float z = 0.f;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      weight_src[i] = (lane + i * kWarpSize < E) ? expf(sel[i] - m) : 0.f;
      z += weight_src[i];
    }
    z = warp_sum(z);
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) { weight_src[i] /= z; sel[i] = weight_src[i]; }
  }
  if constexpr (P::kRouter == kSigmoidGroupTopK && P::kGroups > 1) {
    constexpr int GS = E / P::kGroups;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i)
      if (lane + i * kWarpSize < E) group_sel[warp][lane + i * kWarpSize] = sel[i];
    __syncwarp();
    float gscore = kNegInf;
    if (lane < P::kGroups) {
      float best = kNegInf, second = kNegInf;
      for (int j = 0; j < GS; ++j) {
        float v = group_sel[warp][lane * GS + j];
        if (v > best) { second = best; best = v; } else if (v > second) { second = v; }
      }
      gscore = P::kGroupScore == kGroupMax ? best : best + second;
    }
    uint32_t kept = 0;
    for (int r = 0; r < P::kTopKGroups; ++r) {
      float v = (kept >> lane) & 1u ? kNegInf : gscore;
      int idx = lane < P::kGroups ? lane : 1 << 30;
      if (lane >= P::kGroups) v = kNegInf;
      warp_argmax(v, idx);
      kept |= 1u << idx;
    }
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      int e = lane + i * kWarpSize;
      if (e < E && !((kept >> (e / GS)) & 1u)) sel[i] = kNegInf;
    }
  }

  // top-k: each round takes the best remaining expert of the warp.
  int my_id = -1;
  float my_w = 0.f;
  float wsum = 0.f;
  for (int k = 0; k < K; ++k) {
    float v = kNegInf;
    int idx = 1 << 30;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {  // -inf marks experts masked out or already taken
      if (sel[i] > v) { v = sel[i]; idx = lane + i * kWarpSize; }
    }
    warp_argmax(v, idx);
    // the owner lane reads the weight source and retires the expert
    float w = 0.f;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      if (lane + i * kWarpSize == idx) { w = weight_src[i]; sel[i] = -INFINITY; }
    }
    w = __shfl_sync(0xffffffffu, w, idx % kWarpSize);
    if (lane == k) { my_id = idx; my_w = w; }
    wsum += (P::kRouter == kTopKSoftmax) ? 0.f : w;
  }
  if constexpr (P::kRouter == kTopKSoftmax) {  // softmax over the chosen logits
    float m = __shfl_sync(0xffffffffu, my_w, 0);  // round 0 holds the largest logit
    float ex = lane < K ? expf(my_w - m) : 0.f;
    float z = warp_sum(ex);
    my_w = ex / z;
  } else if (P::kRenormalize) {
    my_w = my_w / wsum;
  }
  my_w *= P::kScaling;
  Choice c{my_id, my_w, -1};
  if (lane < K) {
    rp.topk_ids[size_t(t) * K + lane] = my_id;
    rp.topk_weights[size_t(t) * K + lane] = my_w;
    int local = my_id - P::kExpertBegin;
    if (local >= 0 && local < P::kLocalExperts) c.slot = atomicAdd(&counts[local], 1);
    rp.slot_in_expert[size_t(t) * K + lane] = c.slot;
  }
  return c;
}

template <class P, bool kSharedCounts>
__device__ void schedule_warp(const RoutingParams& rp, const int32_t* counts, int32_t* offsets_smem);
template <class P>
__device__ void scatter_range(const RoutingParams& rp, const int32_t* offsets, int begin, int stride);

// Tokens per routing block (one warp each) of the many-block path; more threads also make the last
// block's scatter shorter.
constexpr int kRouteWarps = 8;

// Zeroes the many-block path's counters: a kernel rather than a memset, so route_kernel can be
// launched programmatically and wait for it on the device (a memset node was followed by a 5-18 us
// gap before the route kernel in H200 graph replays).
template <class P>
__global__ void zero_counters_kernel(int32_t* counters) {
  pdl_launch_dependents();
  for (int i = threadIdx.x; i < P::kLocalExperts + 1; i += blockDim.x) counters[i] = 0;
}

// One warp per token; the last block to finish builds the GEMM schedule (and, for small batches,
// the permutation), so routing costs one launch after zero_counters_kernel.
template <class P, class LogitT>
__global__ void __launch_bounds__(kRouteWarps * kWarpSize) route_kernel(RoutingParams rp) {
  __shared__ float group_sel[kRouteWarps][P::kExperts];
  __shared__ int32_t offsets_s[P::kLocalExperts + 1];
  __shared__ bool is_last;
  pdl_launch_dependents();
  pdl_wait();  // the counters are zeroed
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t < rp.num_tokens) route_token<P, LogitT>(rp, t, warp, lane, group_sel, rp.counts);
  __threadfence();  // this block's counts and slots, before it reports done
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(rp.blocks_done, 1) == int(gridDim.x) - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // every other block's counts are visible now
  if (warp == 0) schedule_warp<P, false>(rp, rp.counts, offsets_s);
  if (rp.scatter_in_last_block) {
    __syncthreads();
    scatter_range<P>(rp, offsets_s, threadIdx.x, blockDim.x);
  }
}

// Small batches, one block: every warp routes one token, the experts are counted in shared memory,
// and the block builds the schedule and the permutation from what its warps hold in registers.
// No memset, no global atomics, no grid-wide "last block" hand-off: routing a decode step is one
// short launch (the many-block path spent ~12 us here at T = 1 on an H200).
template <class P>
struct OneBlockRouting {
  // group_sel takes warps x experts floats of the 48 KB static shared memory.
  static constexpr int kWarps = P::kExperts * 4 * 32 <= 40 * 1024 ? 32 : (P::kExperts * 4 * 16 <= 40 * 1024 ? 16 : 8);
  // One token per warp: the block runs on one SM, so routing more tokens here is issue-bound
  // (T = 64 at two per warp took 22 us on an H200, against ~13 us for the many-block path).
  static constexpr int kTokensPerWarp = 1;
  static constexpr int kMaxTokens = kWarps * kTokensPerWarp;
  static_assert(P::kTopK <= kWarpSize, "one lane per chosen expert");
};

template <class P, class LogitT>
__global__ void __launch_bounds__(OneBlockRouting<P>::kWarps * kWarpSize) route_one_block_kernel(RoutingParams rp) {
  using R = OneBlockRouting<P>;
  constexpr int K = P::kTopK;
  __shared__ float group_sel[R::kWarps][P::kExperts];
  __shared__ int32_t counts_s[P::kLocalExperts];
  __shared__ int32_t offsets_s[P::kLocalExperts + 1];
  pdl_launch_dependents();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int e = threadIdx.x; e < P::kLocalExperts; e += blockDim.x) counts_s[e] = 0;
  __syncthreads();
  Choice mine[R::kTokensPerWarp];
#pragma unroll
  for (int i = 0; i < R::kTokensPerWarp; ++i) {
    const int t = warp + R::kWarps * i;
    mine[i] = t < rp.num_tokens ? route_token<P, LogitT>(rp, t, warp, lane, group_sel, counts_s) : Choice{0, 0.f, -1};
  }
  __syncthreads();
  if (warp == 0) schedule_warp<P, true>(rp, counts_s, offsets_s);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < R::kTokensPerWarp; ++i) {
    const int t = warp + R::kWarps * i;
    if (t < rp.num_tokens && lane < K) {
      const Choice& c = mine[i];
      int row = -1;
      if (c.slot >= 0) {
        row = offsets_s[c.expert - P::kExpertBegin] + c.slot;
        rp.row_token[row] = t;
        rp.row_weight[row] = c.weight;
      }
      rp.token_row[size_t(t) * K + lane] = row;
    }
  }
}

// One warp: exclusive scan of the per-expert counts, then the work tiles of both GEMMs.
// The offsets also go to `offsets_smem`, where the block's scatter reads them.
template <class P, bool kSharedCounts>
__device__ void schedule_warp(const RoutingParams& rp, const int32_t* counts, int32_t* offsets_smem) {
  constexpr int E = P::kLocalExperts, PER_LANE = (E + kWarpSize - 1) / kWarpSize;
  const int lane = threadIdx.x % kWarpSize, bn1 = rp.bn1, bn2 = rp.bn2;
  const int first = lane * PER_LANE;  // each lane owns a run of consecutive experts
  int c[PER_LANE], rows = 0, tiles1 = 0, tiles2 = 0;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    c[i] = first + i < E ? (kSharedCounts ? counts[first + i] : __ldcg(counts + first + i)) : 0;
    rows += c[i];
    tiles1 += (c[i] + bn1 - 1) / bn1;
    tiles2 += (c[i] + bn2 - 1) / bn2;
  }
  int incl_rows = rows, incl_t1 = tiles1, incl_t2 = tiles2;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    int a = __shfl_up_sync(0xffffffffu, incl_rows, off);
    int b = __shfl_up_sync(0xffffffffu, incl_t1, off);
    int d = __shfl_up_sync(0xffffffffu, incl_t2, off);
    if (lane >= off) { incl_rows += a; incl_t1 += b; incl_t2 += d; }
  }
  int row = incl_rows - rows, t1 = incl_t1 - tiles1, t2 = incl_t2 - tiles2;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    int e = first + i;
    if (e < E) {
      rp.offsets[e] = row;
      offsets_smem[e] = row;
      for (int r = 0; r < c[i]; r += bn1, ++t1) { rp.work1_expert[t1] = e; rp.work1_row0[t1] = row + r; }
      for (int r = 0; r < c[i]; r += bn2, ++t2) { rp.work2_expert[t2] = e; rp.work2_row0[t2] = row + r; }
      row += c[i];
    }
  }
  if (lane == 31) {
    rp.offsets[E] = incl_rows;
    offsets_smem[E] = incl_rows;
    rp.num_work[0] = incl_t1;
    rp.num_work[1] = incl_t2;
  }
  __syncwarp();
}

// Each (token, slot) routed to a local expert gets its row in expert order.  `offsets` is the
// routing block's shared copy or the global one; loads are batched so their latencies overlap.
template <class P>
__device__ void scatter_range(const RoutingParams& rp, const int32_t* offsets, int begin, int stride) {
  constexpr int kBatch = 4;
  const int total = rp.num_tokens * P::kTopK;
  for (int i0 = begin; i0 < total; i0 += kBatch * stride) {
    int slot[kBatch], expert[kBatch];
    float weight[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * stride;
      const bool ok = i < total;
      slot[b] = ok ? __ldcg(rp.slot_in_expert + i) : -1;
      expert[b] = ok ? __ldcg(rp.topk_ids + i) : 0;
      weight[b] = ok ? __ldcg(rp.topk_weights + i) : 0.f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * stride;
      if (i >= total) break;
      int row = -1;
      if (slot[b] >= 0) {
        row = offsets[expert[b] - P::kExpertBegin] + slot[b];
        rp.row_token[row] = i / P::kTopK;
        rp.row_weight[row] = weight[b];
      }
      rp.token_row[i] = row;
    }
  }
}

// Large batches scatter with the whole GPU.
template <class P>
__global__ void scatter_kernel(RoutingParams rp) {
  pdl_wait();
  pdl_launch_dependents();
  scatter_range<P>(rp, rp.offsets, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}

// out[t, :] = sum over the token's local slots of the weighted GEMM2 rows (zero if none).
template <class P>
__global__ void finalize_kernel(int num_tokens, const int32_t* __restrict__ token_row,
                                const __nv_bfloat16* __restrict__ y, __nv_bfloat16* __restrict__ out) {
  constexpr int H = P::kHidden, VEC = 8, PER_ROW = H / VEC;  // H is a multiple of 32
  pdl_wait();
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= num_tokens * PER_ROW) return;
  int t = idx / PER_ROW, c = (idx % PER_ROW) * VEC;
  float acc[VEC] = {};
#pragma unroll
  for (int k = 0; k < P::kTopK; ++k) {
    int row = token_row[t * P::kTopK + k];
    if (row >= 0) {
      uint4 v = *reinterpret_cast<const uint4*>(y + size_t(row) * H + c);
      const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += __bfloat162float(b[j]);
    }
  }
  uint4 o;
  __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
  for (int j = 0; j < VEC; ++j) ob[j] = __float2bfloat16(acc[j]);
  *reinterpret_cast<uint4*>(out + size_t(t) * H + c) = o;
}

template <class P>
__device__ __forceinline__ float activation(float gate, float up) {
  if constexpr (P::kHasLimit) {
    gate = fminf(gate, P::kLimit);
    up = fminf(fmaxf(up, -P::kLimit), P::kLimit);
  }
  // Fast exp and divide (MUFU): outputs are rounded to bf16, and the IEEE versions cost ~25 more
  // instructions per element of the GEMM1 epilogue.  exp overflowing to inf gives gate * 0 = -0.
  if constexpr (P::kActivation == kSwiGLUOai) {
    return __fdividef(gate, 1.0f + __expf(-P::kAlpha * gate)) * (up + 1.0f);
  } else {
    return __fdividef(gate, 1.0f + __expf(-gate)) * up;
  }
}

// Epilogue loads go before the stores they feed, in chunks: the compiler must assume a bf16 store
// may alias a float load, so a load placed after a store waits for it, and an epilogue that
// interleaved them (one routing weight per element) was a serial chain of L2 round trips, ~128 per
// thread at m64n256 (ptxas SASS; GEMM2 at T = 16384 stalled on long scoreboard 3.2 per issue).
constexpr int kEpilogueChunk = 16;

// GEMM1 epilogue: prepare interleaves W1|W3 in blocks of 8 rows (gate rows r..r+7, then the
// matching up rows), so accumulator rows g and g+8 of a thread are gate and up of one column.
template <class P>
struct SwigluEpilogue {
  template <class Accum, class Coords>
  __device__ static void apply(const sm90::GemmParams& p, const Accum& acc, const Coords& coords, int expert,
                               int row_base, int row0, int row_end) {
    constexpr int I = P::kInter;
    const float escale = __ldg(p.expert_scale + expert);
    // Every element of this thread is gate/up row pair g / g+8 of one intermediate column j.
    const int r_first = row_base + cute::get<0>(coords(0));
    const int j_first = (r_first / 16) * 8 + r_first % 16;
    float bias_gate = 0.f, bias_up = 0.f;
    if constexpr (P::kBias13) {
      if (j_first < I) {
        bias_gate = __ldg(p.bias + size_t(expert) * 2 * I + j_first);
        bias_up = __ldg(p.bias + size_t(expert) * 2 * I + I + j_first);
      }
    }
    CUTE_UNROLL
    for (int e = 0; e < cute::size(acc); e += 4) {
      CUTE_UNROLL
      for (int v = 0; v < 2; ++v) {  // elements e+v (row g) and e+v+2 (row g+8)
        auto mn = coords(e + v);
        int r = row_base + cute::get<0>(mn);
        int j = (r / 16) * 8 + r % 16;
        int row = row0 + cute::get<1>(mn);
        if (j < I && row < row_end) {
          float gate = acc(e + v) * escale + bias_gate, up = acc(e + v + 2) * escale + bias_up;
          p.out[size_t(row) * I + j] = __float2bfloat16(activation<P>(gate, up));
        }
      }
    }
  }
};

// GEMM2 epilogue: bias, then the routing weight of the row; finalize sums the rows per token.
template <class P>
struct WeightedEpilogue {
  template <class Accum, class Coords>
  __device__ static void apply(const sm90::GemmParams& p, const Accum& acc, const Coords& coords, int expert,
                               int row_base, int row0, int row_end) {
    constexpr int H = P::kHidden, kElems = decltype(cute::size(acc))::value;
    // kElems = N/2 (N a multiple of 8), e.g. 24 at N = 48: the largest of 16, 8, 4 dividing it
    constexpr int kChunk = kElems % kEpilogueChunk == 0 ? kEpilogueChunk : (kElems % 8 == 0 ? 8 : 4);
    static_assert(kElems % kChunk == 0, "accumulator elements come in whole chunks");
    const float escale = __ldg(p.expert_scale + expert);
    CUTE_UNROLL
    for (int e0 = 0; e0 < kElems; e0 += kChunk) {
      float scale[kChunk];  // routing weight of each element's token row
      float bias[kChunk];
      CUTE_UNROLL
      for (int i = 0; i < kChunk; ++i) {
        auto mn = coords(e0 + i);
        const int n = row_base + cute::get<0>(mn), row = row0 + cute::get<1>(mn);
        scale[i] = row < row_end ? __ldg(p.row_weight + row) : 0.f;
        bias[i] = 0.f;
        if constexpr (P::kBias2) bias[i] = n < H ? __ldg(p.bias + size_t(expert) * H + n) : 0.f;
      }
      CUTE_UNROLL
      for (int i = 0; i < kChunk; ++i) {
        auto mn = coords(e0 + i);
        const int n = row_base + cute::get<0>(mn), row = row0 + cute::get<1>(mn);
        if (n < H && row < row_end)
          p.out[size_t(row) * H + n] = __float2bfloat16((acc(e0 + i) * escale + bias[i]) * scale[i]);
      }
    }
  }
};

}  // namespace moegen
