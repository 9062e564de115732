// The MoE layer's non-GEMM stages before the GEMMs, arch-neutral, specialized by a `Problem` struct
// of compile-time constants that moegen renders from the model spec:
//   route (scores, selection, weights, per-expert counts), or take the caller's expert ids and
//   weights (the experts-only entry point) -> schedule (offsets, GEMM work tiles)
//   -> scatter (permutation); then the arch's GEMMs and finalize.cuh.
// Only the layer's translation unit includes this: editing it rebuilds no GEMM kernel.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>

#include "moegen/common.cuh"
#include "moegen/pdl.cuh"
#include "moegen/quantize.cuh"

namespace moegen {

// kSigmoidGroupTopK: DeepSeek-V3 (sigmoid scores, group-limited selection on score + bias).
// kSoftmaxTopK: Qwen3-MoE.  kTopKSoftmax: gpt-oss (top-k logits, softmax over them).
// kSqrtSoftplusTopK: DeepSeek-V4 (sqrt(softplus(logit)) scores, plain top-k on score + bias).
enum RouterKind { kSigmoidGroupTopK = 0, kSoftmaxTopK = 1, kTopKSoftmax = 2, kSqrtSoftplusTopK = 3 };
enum GroupScore { kGroupMax = 0, kGroupTop2Sum = 1 };

struct RoutingParams {
  // Fused layer: the router's inputs, and its outputs topk_ids / topk_weights.
  const void* logits;
  const float* score_bias;
  int32_t* topk_ids;        // [T, K]
  float* topk_weights;      // [T, K]
  // Experts-only entry point: the caller's choice.
  const void* ids_in;        // [T, K] int32 or int64 global expert ids
  const float* weights_in;   // [T, K]
  const int32_t* expert_map; // [kExperts] global -> local id, -1 when not on this rank; or nullptr
  int num_tokens;
  const float* slot_weight; // [T, K] the weight scatter reads: topk_weights or weights_in
  int32_t* counts;          // [E_local] zeroed before the launch
  int32_t* blocks_done;     // [1] zeroed before the launch
  int32_t* slot_in_expert;  // [T, K] the (token, slot)'s row among its expert's, -1 if not local
  int32_t* local_expert;    // [T, K] local expert of the (token, slot), -1 if not local
  int32_t* offsets;         // [E_local + 1]
  int bn1, bn2;             // token rows per GEMM1 / GEMM2 work tile
  int32_t* work1_expert;    // per GEMM1 work tile: its expert, first row, and the expert's end row
  int32_t* work1_row0;
  int32_t* work1_row_end;
  int32_t* work2_expert;
  int32_t* work2_row0;
  int32_t* work2_row_end;
  int32_t* num_work;        // [2]
  unsigned long long* expert_progress;  // [E_local] GEMM1's finished tiles per expert (GemmParams), zeroed here
  unsigned long long* quantized_rows;   // W4A8: [E_local] the `h` quantizer's finished rows per expert, zeroed here
  int32_t* row_token;       // [rows] permuted row -> token
  float* row_weight;        // [rows]
  int32_t* token_row;       // [T, K] -> permuted row or -1
  int scatter_in_last_block;  // small batches: the last routing block also scatters (one launch less)
  int batched_max_tokens_per_expert;  // the batched entry point's M (its rows are e * M + i)
  // W4A8 (P::kFp8Activations): the hidden states [T, H], and their e4m3 rows and per-row scales,
  // which the routing kernel writes (one-block routing: the warps without a token; many-block: blocks
  // of its grid past the routing ones).  A quantizer kernel of its own added a launch and its drain
  // to the chain.
  const __nv_bfloat16* hidden;
  uint8_t* hidden_q;    // [T, H]
  float* hidden_scale;  // [T]
};

// Volatile loads: route_token issues every load of a warp before its first sigmoid, and without
// `volatile` the compiler moved each back behind the previous expert's division (see there).
__device__ __forceinline__ float load_logit(const float* p) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ float load_logit(const __nv_bfloat16* p) {
  unsigned short v;
  asm volatile("ld.global.nc.b16 %0, [%1];" : "=h"(v) : "l"(p));
  return __bfloat162float(__ushort_as_bfloat16(v));
}

// Selection runs on order keys: a float's bits mapped so that unsigned order is float order, and 0
// (below every key, -inf included) marks an expert masked out or already taken.  A warp's argmax is
// then two single-instruction reductions (REDUX max of the keys, REDUX min of the lanes' lowest
// index holding it: ties go to the lower index, as in the reference) instead of five dependent
// rounds of two shuffles.
__device__ __forceinline__ uint32_t order_key(float f) {
  uint32_t u = __float_as_uint(f);
  u = u == 0x80000000u ? 0u : u;  // -0 ties with +0, as in the reference (the lower index wins)
  return u ^ ((u & 0x80000000u) ? 0xffffffffu : 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float(k ^ ((k & 0x80000000u) ? 0x80000000u : 0xffffffffu));
}

// The warp's largest key among keys[i] of lane l = expert l + 32 i: returns the lowest such expert.
template <int N>
__device__ __forceinline__ int warp_argmax_key(const uint32_t (&keys)[N], int lane) {
  uint32_t m = keys[0];
#pragma unroll
  for (int i = 1; i < N; ++i) m = max(m, keys[i]);
  const uint32_t best = __reduce_max_sync(0xffffffffu, m);
  uint32_t first = 0xffffffffu;
#pragma unroll
  for (int i = N - 1; i >= 0; --i) first = keys[i] == best ? uint32_t(lane + i * kWarpSize) : first;
  return int(__reduce_min_sync(0xffffffffu, first));
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

// What lane k < K of a routing warp chose for its token: local expert, combine weight, and its slot
// among the expert's rows (-1 for both when the expert lives on another EP rank).
struct Choice {
  int local;
  float weight;
  int slot;
};

// Records lane k's choice: a local expert takes the next slot among its rows.
template <class P>
__device__ __forceinline__ Choice count_choice(const RoutingParams& rp, int t, int lane, int local, float weight,
                                               int32_t* counts) {
  Choice c{-1, weight, -1};
  if (local >= 0 && local < P::kLocalExperts) {
    c.local = local;
    c.slot = atomicAdd(&counts[local], 1);
  }
  rp.slot_in_expert[size_t(t) * P::kTopK + lane] = c.slot;
  rp.local_expert[size_t(t) * P::kTopK + lane] = c.local;
  return c;
}

// Group scores by REDUX when every group is whole registers of the warp (group size a multiple of
// 32; top-2 sums need exactly 32); otherwise lanes < groups scan their group in shared memory.
template <class P>
struct GroupByRegisters {
  static constexpr int GS = P::kExperts / P::kGroups;
  static constexpr bool value = GS % kWarpSize == 0 && (P::kGroupScore == kGroupMax || GS == kWarpSize);
};
template <class P>
constexpr bool needs_group_smem() {
  return P::kRouter == kSigmoidGroupTopK && P::kGroups > 1 && !GroupByRegisters<P>::value;
}

// One warp per token. Lane l holds experts l, l+32, ...; selection is top_k rounds of a REDUX argmax.
// `counts` may be global (many routing blocks) or shared memory (one block): a generic atomic.
// `group_sel` (warps x experts floats) is only touched when needs_group_smem<P>().
template <class P, class LogitT>
__device__ Choice route_token(const RoutingParams& rp, int t, int warp, int lane, float (*group_sel)[P::kExperts],
                              int32_t* counts) {
  constexpr int E = P::kExperts, PER_LANE = (E + kWarpSize - 1) / kWarpSize, K = P::kTopK;
  constexpr float kNegInf = -INFINITY;
  const LogitT* __restrict__ logits = static_cast<const LogitT*>(rp.logits);
  const float* __restrict__ score_bias = rp.score_bias;

  // Every load first: the sigmoid's division has a called slow path, and a load left behind the
  // previous expert's division costs the warp PER_LANE memory round trips in a row
  // (route_one_block_kernel at T = 1 under ncu, H200: 7.7 us that way, 5.5 us this way).
  float logit[PER_LANE], bias[PER_LANE];
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int e = lane + i * kWarpSize;
    logit[i] = e < E ? load_logit(logits + size_t(t) * E + e) : kNegInf;
    bias[i] = P::kScoreBias && e < E ? load_logit(score_bias + e) : 0.f;
  }
  float sel[PER_LANE], weight_src[PER_LANE];  // selection value, and the value the weight is made from
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int e = lane + i * kWarpSize;
    const float l = logit[i];
    sel[i] = l;
    weight_src[i] = l;
    if constexpr (P::kRouter == kSigmoidGroupTopK || P::kRouter == kSqrtSoftplusTopK) {
      if (e < E) {
        // sigmoid, or sqrt(softplus(l)) with softplus(l) = max(l, 0) + log1p(exp(-|l|)) (no overflow)
        const float s = P::kRouter == kSigmoidGroupTopK ? 1.0f / (1.0f + expf(-l))
                                                         : sqrtf(fmaxf(l, 0.f) + log1pf(expf(-fabsf(l))));
        weight_src[i] = s;
        sel[i] = P::kScoreBias ? s + bias[i] : s;
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
  uint32_t keys[PER_LANE];
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) keys[i] = lane + i * kWarpSize < E ? order_key(sel[i]) : 0u;

  if constexpr (P::kRouter == kSigmoidGroupTopK && P::kGroups > 1) {
    constexpr int G = P::kGroups, GS = E / G;
    uint32_t gkey = 0;  // lane g < G: its group's score as an order key
    if constexpr (GroupByRegisters<P>::value) {
      constexpr int REGS = GS / kWarpSize;  // group g = registers [g * REGS, (g + 1) * REGS) of every lane
#pragma unroll
      for (int g = 0; g < G; ++g) {
        uint32_t m = keys[g * REGS];
#pragma unroll
        for (int j = 1; j < REGS; ++j) m = max(m, keys[g * REGS + j]);
        uint32_t score = __reduce_max_sync(0xffffffffu, m);
        if constexpr (P::kGroupScore == kGroupTop2Sum) {  // REGS == 1: drop the best's lowest lane, max again
          const uint32_t at = __reduce_min_sync(0xffffffffu, keys[g] == score ? uint32_t(lane) : 0xffffffffu);
          const uint32_t second = __reduce_max_sync(0xffffffffu, uint32_t(lane) == at ? 0u : keys[g]);
          score = order_key(key_value(score) + key_value(second));
        }
        gkey = lane == g ? score : gkey;
      }
    } else {
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i)
        if (lane + i * kWarpSize < E) group_sel[warp][lane + i * kWarpSize] = sel[i];
      __syncwarp();
      if (lane < G) {
        float best = kNegInf, second = kNegInf;
        for (int j = 0; j < GS; ++j) {
          float v = group_sel[warp][lane * GS + j];
          if (v > best) { second = best; best = v; } else if (v > second) { second = v; }
        }
        gkey = order_key(P::kGroupScore == kGroupMax ? best : best + second);
      }
    }
    // keep the top topk_group groups: the best remaining key, its lowest lane
    uint32_t kept = 0;
    for (int r = 0; r < P::kTopKGroups; ++r) {
      const uint32_t best = __reduce_max_sync(0xffffffffu, lane < G ? gkey : 0u);
      const int g = __ffs(__ballot_sync(0xffffffffu, lane < G && gkey == best)) - 1;
      kept |= 1u << g;
      if (lane == g) gkey = 0;
    }
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      int e = lane + i * kWarpSize;
      if (e < E && !((kept >> (e / GS)) & 1u)) keys[i] = 0;
    }
  }

  // top-k: each round takes the best remaining expert of the warp.
  int my_id = -1;
  float my_w = 0.f;
  float wsum = 0.f;
  for (int k = 0; k < K; ++k) {
    const int idx = warp_argmax_key(keys, lane);
    // the owner lane reads the weight source and retires the expert
    float w = 0.f;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      if (lane + i * kWarpSize == idx) { w = weight_src[i]; keys[i] = 0; }
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
    // Scores of logits below about -88 (sigmoid) or -104 (sqrt-softplus) are 0 in fp32: a token whose
    // chosen scores all are gets zero weights, not 0 / 0.  Any other sum, NaN included, divides as before.
    my_w = wsum == 0.f ? 0.f : my_w / wsum;
  }
  my_w *= P::kScaling;
  if (lane >= K) return Choice{-1, 0.f, -1};
  rp.topk_ids[size_t(t) * K + lane] = my_id;
  rp.topk_weights[size_t(t) * K + lane] = my_w;
  return count_choice<P>(rp, t, lane, my_id - P::kExpertBegin, my_w, counts);
}

// The experts-only entry point: lane k < K takes slot k of the caller's choice for token t.  An id
// outside [0, kExperts), or one the expert map (or this build's expert range) does not place on
// this rank, contributes nothing.
template <class P, class IdT>
__device__ Choice take_token(const RoutingParams& rp, int t, int lane, int32_t* counts) {
  if (lane >= P::kTopK) return Choice{-1, 0.f, -1};
  const size_t i = size_t(t) * P::kTopK + lane;
  const long long id = static_cast<long long>(static_cast<const IdT*>(rp.ids_in)[i]);
  const float weight = rp.weights_in[i];
  int local = -1;
  if (id >= 0 && id < P::kExperts)
    local = rp.expert_map ? __ldg(rp.expert_map + id) : int(id) - P::kExpertBegin;
  return count_choice<P>(rp, t, lane, local, weight, counts);
}

// Where a routing warp's choice comes from: the router (logits of type LogitT) or the caller's ids
// (of type IdT).  Both kernels below are templated on it.
template <class LogitT>
struct FromLogits {
  template <class P>
  __device__ static Choice choose(const RoutingParams& rp, int t, int warp, int lane,
                                  float (*group_sel)[P::kExperts], int32_t* counts) {
    return route_token<P, LogitT>(rp, t, warp, lane, group_sel, counts);
  }
};
template <class IdT>
struct FromIds {
  template <class P>
  __device__ static Choice choose(const RoutingParams& rp, int t, int /*warp*/, int lane,
                                  float (*/*group_sel*/)[P::kExperts], int32_t* counts) {
    return take_token<P, IdT>(rp, t, lane, counts);
  }
};

template <class P, bool kSharedCounts, int kThreads>
__device__ void schedule_block(const RoutingParams& rp, const int32_t* counts, int32_t* offsets_smem);
template <class P>
__device__ void scatter_range(const RoutingParams& rp, const int32_t* offsets, int begin, int stride);

// Tokens per routing block (one warp each) of the many-block path; more threads also make the last
// block's scatter shorter.
constexpr int kRouteWarps = 8;

// W4A8, many-block routing: blocks after the routing ones in the same grid quantize the hidden rows,
// kRouteWarps / kQuantizeRowsPerBlock warps per row, while the others route.  (A routing warp
// quantizing its own token's row put a warp's 6.5 us per 4096-wide row in series with the routing
// and the last block's schedule.)
constexpr int kQuantizeRowsPerBlock = 2;
__host__ __device__ constexpr int route_blocks(int num_tokens) { return (num_tokens + kRouteWarps - 1) / kRouteWarps; }
template <class P>
int route_grid(int num_tokens) {
  return route_blocks(num_tokens) +
         (P::kFp8Activations ? (num_tokens + kQuantizeRowsPerBlock - 1) / kQuantizeRowsPerBlock : 0);
}

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
template <class P, class Source>
__global__ void __launch_bounds__(kRouteWarps * kWarpSize) route_kernel(RoutingParams rp) {
  __shared__ float group_sel[needs_group_smem<P>() ? kRouteWarps : 1][P::kExperts];
  __shared__ int32_t offsets_s[P::kLocalExperts + 1];
  __shared__ bool is_last;
  pdl_launch_dependents();
  pdl_wait();  // the counters are zeroed
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int routing_blocks = route_blocks(rp.num_tokens);
  if constexpr (P::kFp8Activations) {
    if (int(blockIdx.x) >= routing_blocks) {
      __shared__ float amax_s[kRouteWarps];
      const int row0 = (int(blockIdx.x) - routing_blocks) * kQuantizeRowsPerBlock;
      quantize_rows_e4m3_warps<P::kHidden>(rp.hidden + size_t(row0) * P::kHidden,
                                           min(kQuantizeRowsPerBlock, rp.num_tokens - row0),
                                           rp.hidden_q + size_t(row0) * P::kHidden, rp.hidden_scale + row0, amax_s,
                                           warp, kRouteWarps, 1);
      return;
    }
  }
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t < rp.num_tokens) Source::template choose<P>(rp, t, warp, lane, group_sel, rp.counts);
  __threadfence();  // this block's counts and slots, before it reports done
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(rp.blocks_done, 1) == routing_blocks - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // every other block's counts are visible now
  schedule_block<P, false, kRouteWarps * kWarpSize>(rp, rp.counts, offsets_s);
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
  // group_sel, where needed, takes warps x experts floats of the 48 KB static shared memory.
  static constexpr int kWarps = !needs_group_smem<P>() || P::kExperts * 4 * 32 <= 40 * 1024
                                    ? 32 : (P::kExperts * 4 * 16 <= 40 * 1024 ? 16 : 8);
  // One token per warp: the block runs on one SM, so routing more tokens here is issue-bound
  // (T = 64 at two per warp took 22 us on an H200, against ~13 us for the many-block path).
  static constexpr int kTokensPerWarp = 1;
  // W4A8: this SM also quantizes the hidden rows (moegen/quantize.cuh) on the warps the routing does
  // not use, beside it.  Up to 8 tokens that beat the many-block path (a counter-zeroing kernel, then
  // quantizing blocks beside the routing ones): on an H200 the routing ended 1.8 us sooner at T = 4 on
  // Qwen3-30B-A3B, 1.1 on DeepSeek-V4-Flash, and the layer was 1-4 % faster at T = 3-8 on Qwen3-30B-A3B,
  // level at 6-8 on gpt-oss-120b and DeepSeek-V4-Flash (whose routing ended 0.6 us later at 8).
  static constexpr int kMaxTokens = P::kFp8Activations ? 8 : kWarps * kTokensPerWarp;
  static_assert(kMaxTokens <= kWarps * kTokensPerWarp, "a warp per token");
  static_assert(P::kTopK <= kWarpSize, "one lane per chosen expert");
  // One expert per thread, and only as many warps as that takes: with every warp of the block the
  // schedule took 1.1-1.3 us at T = 1-16 (clock64 stamps, H200), most of it 32 warps' scans and the
  // barrier between them; one warp took 0.7-1.0 us for gpt-oss-120b's 128 experts, but with 8 per
  // lane (256 experts) 1.7 us from T = 4.
  static constexpr int kScheduleWarps = (P::kLocalExperts + kWarpSize - 1) / kWarpSize < kWarps
                                            ? (P::kLocalExperts + kWarpSize - 1) / kWarpSize : kWarps;
  // W4A8: warps [0, max(T, kScheduleWarps)) route and build the schedule, the rest quantize.
  static constexpr int kMaxRoutingWarps = kMaxTokens > kScheduleWarps ? kMaxTokens : kScheduleWarps;
  static_assert(!P::kFp8Activations || kWarps - kMaxRoutingWarps >= kMaxTokens, "at least one quantizing warp per row");
};

// One block per launch (the explicit 1: without it ptxas held this kernel to 32 registers and the
// W4A8 quantizer spilled).
template <class P, class Source>
__global__ void __launch_bounds__(OneBlockRouting<P>::kWarps * kWarpSize, 1) route_one_block_kernel(RoutingParams rp) {
  using R = OneBlockRouting<P>;
  constexpr int K = P::kTopK;
  __shared__ float group_sel[needs_group_smem<P>() ? R::kWarps : 1][P::kExperts];
  __shared__ int32_t counts_s[P::kLocalExperts];
  __shared__ int32_t offsets_s[P::kLocalExperts + 1];
  pdl_launch_dependents();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int e = threadIdx.x; e < P::kLocalExperts; e += blockDim.x) counts_s[e] = 0;
  __syncthreads();
  static_assert(R::kTokensPerWarp == 1, "warps [num_tokens, kWarps) have no token");
  // W4A8: the warps past the routing ones quantize the hidden rows (several warps per row), and the
  // routing warps never wait for them: they meet on named barriers of their own (the schedule's is 1),
  // so the quantizer's loads and its amax exchange stay off the chain to the schedule.
  const int routing_warps = P::kFp8Activations ? max(rp.num_tokens, R::kScheduleWarps) : R::kWarps;
  auto sync_routing_warps = [&] {
    if constexpr (P::kFp8Activations)
      asm volatile("bar.sync 2, %0;\n" ::"r"(routing_warps * kWarpSize) : "memory");
    else
      __syncthreads();
  };
  __shared__ float amax_s[P::kFp8Activations ? R::kWarps : 1];
  if constexpr (P::kFp8Activations)
    if (warp >= routing_warps) {
      quantize_rows_e4m3_warps<P::kHidden>(rp.hidden, rp.num_tokens, rp.hidden_q, rp.hidden_scale, amax_s,
                                           warp - routing_warps, R::kWarps - routing_warps, 3);
      return;
    }
  Choice mine[R::kTokensPerWarp];
#pragma unroll
  for (int i = 0; i < R::kTokensPerWarp; ++i) {
    const int t = warp + R::kWarps * i;
    mine[i] = t < rp.num_tokens ? Source::template choose<P>(rp, t, warp, lane, group_sel, counts_s)
                                : Choice{-1, 0.f, -1};
  }
  sync_routing_warps();
  if (warp < R::kScheduleWarps) schedule_block<P, true, R::kScheduleWarps * kWarpSize>(rp, counts_s, offsets_s);
  sync_routing_warps();
#pragma unroll
  for (int i = 0; i < R::kTokensPerWarp; ++i) {
    const int t = warp + R::kWarps * i;
    if (t < rp.num_tokens && lane < K) {
      const Choice& c = mine[i];
      int row = -1;
      if (c.slot >= 0) {
        row = offsets_s[c.local] + c.slot;
        rp.row_token[row] = t;
        rp.row_weight[row] = c.weight;
      }
      rp.token_row[size_t(t) * K + lane] = row;
    }
  }
}

// Inclusive scan of three counters across a warp.
__device__ __forceinline__ void warp_inclusive_scan3(int lane, int& a, int& b, int& c) {
#pragma unroll
  for (int off = 1; off < kWarpSize; off <<= 1) {
    const int x = __shfl_up_sync(0xffffffffu, a, off);
    const int y = __shfl_up_sync(0xffffffffu, b, off);
    const int z = __shfl_up_sync(0xffffffffu, c, off);
    if (lane >= off) { a += x; b += y; c += z; }
  }
}

// Threads [0, kThreads) of the block call it, all of them: exclusive scan of the per-expert counts,
// then the work tiles of both GEMMs.  Thread i owns a run of consecutive experts; a warp scan, and with
// several warps their totals through shared memory (named barrier 1 over the kThreads threads) and a
// second warp scan, give every thread its offsets.  The offsets also go to `offsets_smem`, where the
// block's scatter reads them after a __syncthreads().
template <class P, bool kSharedCounts, int kThreads>
__device__ void schedule_block(const RoutingParams& rp, const int32_t* counts, int32_t* offsets_smem) {
  constexpr int E = P::kLocalExperts, PER_THREAD = (E + kThreads - 1) / kThreads, kWarps = kThreads / kWarpSize;
  static_assert(kThreads % kWarpSize == 0 && kWarps <= kWarpSize, "one warp scans the warps' totals");
  __shared__ int totals_s[kWarps][3];
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  // Tile sizes are powers of two (the config space's block_n; forward() checks): shifts, not divides.
  const int shift1 = __ffs(rp.bn1) - 1, shift2 = __ffs(rp.bn2) - 1;
  const int first = tid * PER_THREAD;
  int c[PER_THREAD], rows = 0, tiles1 = 0, tiles2 = 0;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    c[i] = first + i < E ? (kSharedCounts ? counts[first + i] : __ldcg(counts + first + i)) : 0;
    rows += c[i];
    tiles1 += (c[i] + rp.bn1 - 1) >> shift1;
    tiles2 += (c[i] + rp.bn2 - 1) >> shift2;
  }
  int incl_rows = rows, incl_t1 = tiles1, incl_t2 = tiles2;
  warp_inclusive_scan3(lane, incl_rows, incl_t1, incl_t2);
  int before_rows = 0, before_t1 = 0, before_t2 = 0, total_rows, total_t1, total_t2;
  if constexpr (kWarps == 1) {  // one warp (it alone calls this): no barrier
    total_rows = __shfl_sync(0xffffffffu, incl_rows, kWarpSize - 1);
    total_t1 = __shfl_sync(0xffffffffu, incl_t1, kWarpSize - 1);
    total_t2 = __shfl_sync(0xffffffffu, incl_t2, kWarpSize - 1);
  } else {
    if (lane == kWarpSize - 1) {
      totals_s[warp][0] = incl_rows;
      totals_s[warp][1] = incl_t1;
      totals_s[warp][2] = incl_t2;
    }
    asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
    int w_rows = lane < kWarps ? totals_s[lane][0] : 0, w_t1 = lane < kWarps ? totals_s[lane][1] : 0,
        w_t2 = lane < kWarps ? totals_s[lane][2] : 0;
    warp_inclusive_scan3(lane, w_rows, w_t1, w_t2);
    const int src = warp > 0 ? warp - 1 : 0;  // the warps before this one
    before_rows = __shfl_sync(0xffffffffu, w_rows, src);
    before_t1 = __shfl_sync(0xffffffffu, w_t1, src);
    before_t2 = __shfl_sync(0xffffffffu, w_t2, src);
    total_rows = __shfl_sync(0xffffffffu, w_rows, kWarps - 1);
    total_t1 = __shfl_sync(0xffffffffu, w_t1, kWarps - 1);
    total_t2 = __shfl_sync(0xffffffffu, w_t2, kWarps - 1);
  }
  int row = incl_rows - rows + (warp > 0 ? before_rows : 0);
  int t1 = incl_t1 - tiles1 + (warp > 0 ? before_t1 : 0);
  int t2 = incl_t2 - tiles2 + (warp > 0 ? before_t2 : 0);
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    int e = first + i;
    if (e < E) {
      rp.offsets[e] = row;
      offsets_smem[e] = row;
      rp.expert_progress[e] = 0;
      if (rp.quantized_rows) rp.quantized_rows[e] = 0;
      for (int r = 0; r < c[i]; r += rp.bn1, ++t1) {
        rp.work1_expert[t1] = e;
        rp.work1_row0[t1] = row + r;
        rp.work1_row_end[t1] = row + c[i];
      }
      for (int r = 0; r < c[i]; r += rp.bn2, ++t2) {
        rp.work2_expert[t2] = e;
        rp.work2_row0[t2] = row + r;
        rp.work2_row_end[t2] = row + c[i];
      }
      row += c[i];
    }
  }
  if (tid == kThreads - 1) {
    rp.offsets[E] = total_rows;
    offsets_smem[E] = total_rows;
    rp.num_work[0] = total_t1;
    rp.num_work[1] = total_t2;
  }
}

// Each (token, slot) routed to a local expert gets its row in expert order.  `offsets` is the
// routing block's shared copy or the global one; loads are batched so their latencies overlap.
template <class P>
__device__ void scatter_range(const RoutingParams& rp, const int32_t* offsets, int begin, int stride) {
  constexpr int kBatch = 4;
  const int total = rp.num_tokens * P::kTopK;
  for (int i0 = begin; i0 < total; i0 += kBatch * stride) {
    int slot[kBatch], local[kBatch];
    float weight[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * stride;
      const bool ok = i < total;
      slot[b] = ok ? __ldcg(rp.slot_in_expert + i) : -1;
      local[b] = ok ? __ldcg(rp.local_expert + i) : 0;
      weight[b] = ok ? __ldcg(rp.slot_weight + i) : 0.f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * stride;
      if (i >= total) break;
      int row = -1;
      if (slot[b] >= 0) {
        row = offsets[local[b]] + slot[b];
        rp.row_token[row] = i / P::kTopK;
        rp.row_weight[row] = weight[b];
      }
      rp.token_row[i] = row;
    }
  }
}

// The batched entry point's schedule and permutation, one block: local expert e's rows are its first
// expert_num_tokens[e] input rows, in order, each with weight 1; row offsets[e] + i reads and writes row
// e * M + i of the [E_local * M, hidden] input and output (M: rp.batched_max_tokens_per_expert).  Each
// count is clamped to [0, M], and the rows in expert order past max_rows (the pipeline's capacity) are
// dropped: counts live on the GPU.
// rp.counts gets the clamped counts and, at [E], their total (store_rows_kernel marks dropped rows).
constexpr int kBatchedScheduleThreads = 256;
template <class P>
__global__ void __launch_bounds__(kBatchedScheduleThreads, 1)
    schedule_batched_kernel(RoutingParams rp, const int32_t* expert_num_tokens, int max_rows) {
  constexpr int E = P::kLocalExperts, PER_LANE = (E + kWarpSize - 1) / kWarpSize;
  const int max_tokens_per_expert = rp.batched_max_tokens_per_expert;
  __shared__ int32_t counts_s[E];
  __shared__ int32_t offsets_s[E + 1];
  pdl_launch_dependents();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (warp == 0) {  // lane l clamps experts [l * PER_LANE, (l + 1) * PER_LANE) after a scan of the lanes' sums
    int c[PER_LANE], sum = 0;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      const int e = lane * PER_LANE + i;
      c[i] = e < E ? min(max(__ldg(expert_num_tokens + e), 0), max_tokens_per_expert) : 0;
      sum += c[i];
    }
    int incl = sum;
#pragma unroll
    for (int off = 1; off < kWarpSize; off <<= 1) {
      const int x = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += x;
    }
    int before = incl - sum;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      const int e = lane * PER_LANE + i;
      if (e < E) {
        counts_s[e] = min(c[i], max(max_rows - before, 0));
        rp.counts[e] = c[i];
      }
      before += c[i];
    }
    if (lane == kWarpSize - 1) rp.counts[E] = incl;
  }
  __syncthreads();
  schedule_block<P, true, kBatchedScheduleThreads>(rp, counts_s, offsets_s);
  __syncthreads();
  for (int e = warp; e < E; e += kBatchedScheduleThreads / kWarpSize) {
    const int row0 = offsets_s[e], n = counts_s[e];
    for (int i = lane; i < n; i += kWarpSize) {
      rp.row_token[row0 + i] = e * max_tokens_per_expert + i;
      rp.row_weight[row0 + i] = 1.f;
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

}  // namespace moegen
