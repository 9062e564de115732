// Grouped GEMM for MoE experts on SM90: MXFP4 weights x BF16 activations, FP32 accumulation.
//
// Swap-AB: the weight rows are the wgmma M side (64 per warpgroup, register-sourced A operand,
// widened from e2m1 in registers), tokens are the N side (B operand, bf16 in shared memory).
// One CTA computes a BM x BN tile of  out^T[weight row, token row]  for one expert: blockIdx.x
// picks a work tile (expert, first token row) from the schedule the routing stage built on the
// device, blockIdx.y picks the weight-row tile. A cp.async ring of `Stages` slots feeds both
// operands; weights stream in the layout moegen.prepare writes (one 16-byte load per thread
// per 64x64 atom), activations are gathered by row index straight into the swizzled smem tile.
#pragma once
#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cutlass/arch/barrier.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "moegen/mxfp4_convert.cuh"
#include "moegen/pdl.cuh"

namespace moegen::sm90 {
using namespace cute;

// Prepared weight atoms: 64 weight rows x 64 K, 16 bytes of e2m1 per thread of a warpgroup.
constexpr int kAtomRows = 64;
constexpr int kAtomK = 64;
constexpr int kAtomBytes = 2048;
constexpr int kAtomScaleBytes = 128;  // [warp][g][(g,kg0) (g+8,kg0) (g,kg1) (g+8,kg1)]

constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }
constexpr int ceil_div(int x, int m) { return (x + m - 1) / m; }

// Padded sizes of a prepared weight tensor [E, N, K] (moegen.prepare mirrors these).
constexpr int padded_rows(int n) { return round_up(n, 128); }
constexpr int padded_k(int k) { return round_up(k, kAtomK); }

struct GemmParams {
  const uint8_t* w;              // [E, Npad/64, Kpad/64, 2048]
  const uint8_t* w_scales;       // [E, Npad/64, Kpad/64, 128]
  const float* expert_scale;     // [E]
  const float* bias;             // epilogue bias or nullptr
  const __nv_bfloat16* act;      // B operand rows, row length K
  const int32_t* act_row;        // permuted row -> source row of `act` (gather), or nullptr
  const int32_t* offsets;        // [E+1] first permuted row of each expert
  const int32_t* work_expert;    // [max_work]
  const int32_t* work_row0;      // [max_work]
  const int32_t* num_work;       // [1]
  const float* row_weight;       // [rows] routing weight per permuted row (GEMM2)
  __nv_bfloat16* out;            // epilogue output
  int schedule_ready;            // the schedule predates the previous kernel: read it before pdl wait
};


template <int BM_, int BN_, int BK_, int Stages_>
struct TileShape {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, Stages = Stages_;
  static constexpr int kWarpGroups = BM / 64;
  static constexpr int kThreads = 128 * kWarpGroups;
  static_assert(BM % 64 == 0 && BM <= 256, "BM: 64 weight rows per consumer warpgroup");
  static_assert(BK % kAtomK == 0, "BK: whole prepared atoms along K");
  static_assert(BN % 8 == 0 && BN >= 8 && BN <= 256, "BN: a wgmma N");
  static_assert(Stages >= 3, "the ring keeps one wgmma in flight and one slot loading");
};

template <class Tile, int N, int K, class Epilogue>
struct GroupedGemm {
  static constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, Stages = Tile::Stages;
  static constexpr int kN = N, kK = K;  // true (unpadded) output rows and reduction length
  static constexpr int kWarpGroups = Tile::kWarpGroups, kThreads = Tile::kThreads;
  static constexpr int kKPad = padded_k(K);
  static constexpr int kNPad = padded_rows(N);
  static_assert(kKPad % BK == 0, "config space must only offer BK dividing the padded K");
  static constexpr int kKTiles = kKPad / BK;
  static constexpr int kMTiles = ceil_div(N, BM);
  static constexpr int kAtomsK = BK / kAtomK;
  static constexpr int kKBlocks = BK / 16;  // wgmma k16 steps per K tile
  static constexpr int kLoadDistance = Stages - 2;

  using Mma = decltype(make_tiled_mma(
      SM90::GMMA::rs_op_selector<bfloat16_t, bfloat16_t, float, Shape<_64, Int<BN>, Int<BK>>>()));
  using SmemLayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<bfloat16_t>{},
                                             make_shape(Int<BN>{}, Int<BK>{}, Int<Stages>{})));

  struct SharedStorage {
    alignas(1024) bfloat16_t b[cosize_v<SmemLayoutB>];
    alignas(128) uint8_t a[Stages][kWarpGroups][kAtomsK][kAtomBytes];
    alignas(128) uint8_t s[Stages][kWarpGroups][kAtomsK][kAtomScaleBytes];
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));

  // B rows are 16-byte chunks of 8 bf16; each thread owns a fixed set of (row, chunk) slots.
  static constexpr int kBChunksPerRow = BK / 8;
  static constexpr int kBChunks = BN * kBChunksPerRow;
  static constexpr int kBChunksPerThread = ceil_div(kBChunks, kThreads);
  // Weight bytes per stage in 16-byte chunks.
  static constexpr int kAChunks = kWarpGroups * kAtomsK * (kAtomBytes / 16);
  static constexpr int kSChunks = kWarpGroups * kAtomsK * (kAtomScaleBytes / 16);
  static_assert(kAChunks % kThreads == 0, "every thread copies the same number of weight chunks");
  static_assert(kSChunks <= kThreads, "one scale chunk per thread at most");
};

__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem, bool valid) {
  int src_size = valid ? 16 : 0;  // zero-fill K past the end
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <class G, class Epilogue>
__global__ void __launch_bounds__(G::kThreads) grouped_gemm_kernel(GemmParams p) {
  using namespace cute;
  constexpr int BN = G::BN, BK = G::BK, Stages = G::Stages, K = G::kK;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<typename G::SharedStorage*>(smem_raw);

  // Launched early (PDL): GEMM2 may read its schedule and stream weights while GEMM1 drains; its
  // B rows (GEMM1's output) wait for pdl_wait().  L2-only loads: the schedule is rewritten per call.
  if (!p.schedule_ready) pdl_wait();
  const int work = blockIdx.x;
  if (work >= __ldcg(p.num_work)) return;  // the grid is sized for the worst routing; idle tiles leave
  const int expert = __ldcg(p.work_expert + work);
  const int row0 = __ldcg(p.work_row0 + work);
  const int row_end = __ldcg(p.offsets + expert + 1);
  const int m_tile = blockIdx.y;
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int wg_tid = tid % 128;

  // ---- producer state: every thread copies a fixed slice of each stage ----------------------
  constexpr int kAtomsK = G::kAtomsK;
  constexpr int kAtomsKTotal = G::kKPad / kAtomK;
  const uint8_t* w_tile = p.w + ((size_t(expert) * (G::kNPad / kAtomRows) + m_tile * G::kWarpGroups) *
                                 kAtomsKTotal) * kAtomBytes;
  const uint8_t* s_tile = p.w_scales + ((size_t(expert) * (G::kNPad / kAtomRows) + m_tile * G::kWarpGroups) *
                                        kAtomsKTotal) * kAtomScaleBytes;

  // Per-thread copy slices are fixed for the whole K loop: resolve their addresses once (the
  // swizzled smem offset costs dozens of integer ops per chunk), then each tile adds k0 / slot.
  Tensor sB = make_tensor(make_smem_ptr(ss.b), typename G::SmemLayoutB{});
  constexpr uint32_t kBStageBytes = uint32_t(sizeof(ss.b)) / Stages;
  const uint32_t b_smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(ss.b));
  const __nv_bfloat16* b_src[G::kBChunksPerThread];
  uint32_t b_smem[G::kBChunksPerThread];
  int b_kend[G::kBChunksPerThread];  // the chunk holds data while k0 < b_kend
  bool b_row_ok[G::kBChunksPerThread];
  CUTE_UNROLL
  for (int i = 0; i < G::kBChunksPerThread; ++i) {
    int c = tid + i * G::kThreads;
    int row = c / G::kBChunksPerRow, kc = c % G::kBChunksPerRow;
    int r = row0 + row;
    b_row_ok[i] = c < G::kBChunks && r < row_end;
    int src = b_row_ok[i] ? (p.act_row ? __ldcg(p.act_row + r) : r) : 0;
    b_src[i] = p.act + size_t(src) * K + kc * 8;
    b_kend[i] = K - kc * 8;
    b_smem[i] = b_row_ok[i] ? b_smem_base + uint32_t(reinterpret_cast<const uint8_t*>(
                                  raw_pointer_cast(&sB(row, kc * 8, 0))) - reinterpret_cast<const uint8_t*>(ss.b))
                            : 0u;
  }
  constexpr int kAPerThread = G::kAChunks / G::kThreads;
  const uint8_t* a_src[kAPerThread];
  uint32_t a_smem[kAPerThread];
  CUTE_UNROLL
  for (int i = 0; i < kAPerThread; ++i) {
    int c = tid + i * G::kThreads;     // chunk within the stage: [wg][atom k][128 chunks]
    int atom = c / (kAtomBytes / 16);  // wg * kAtomsK + atom_k
    int within = c % (kAtomBytes / 16);
    int awg = atom / kAtomsK, ak = atom % kAtomsK;
    a_src[i] = w_tile + (size_t(awg) * kAtomsKTotal + ak) * kAtomBytes + within * 16;
    a_smem[i] = static_cast<uint32_t>(__cvta_generic_to_shared(&ss.a[0][awg][ak][within * 16]));
  }
  const bool s_copier = tid < G::kSChunks;
  const uint8_t* s_src = s_tile;
  uint32_t s_smem = 0;
  if (s_copier) {
    int atom = tid / (kAtomScaleBytes / 16);
    int within = tid % (kAtomScaleBytes / 16);
    int awg = atom / kAtomsK, ak = atom % kAtomsK;
    s_src = s_tile + (size_t(awg) * kAtomsKTotal + ak) * kAtomScaleBytes + within * 16;
    s_smem = static_cast<uint32_t>(__cvta_generic_to_shared(&ss.s[0][awg][ak][within * 16]));
  }
  constexpr uint32_t kAStageBytes = uint32_t(sizeof(ss.a[0])), kSStageBytes = uint32_t(sizeof(ss.s[0]));

  // Token rows past the expert's end stay zero for the whole K loop: zero the ring once and never
  // copy them (at decode most of a tile's rows are such padding).  Zero before any cp.async lands.
  {
    uint4* b_words = reinterpret_cast<uint4*>(ss.b);
    constexpr int kWords = int(sizeof(ss.b) / sizeof(uint4));
    for (int i = tid; i < kWords; i += G::kThreads) b_words[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }

  auto load_b = [&](int kt) {
    const uint32_t slot_off = uint32_t(kt % Stages) * kBStageBytes;
    const int k0 = kt * BK;
    CUTE_UNROLL
    for (int i = 0; i < G::kBChunksPerThread; ++i) {
      if (b_row_ok[i]) {  // K past the end is zero-filled: the slot may hold an earlier tile's data
        const bool ok = (G::kK % BK == 0) || k0 < b_kend[i];
        cp_async_16(b_smem[i] + slot_off, ok ? b_src[i] + k0 : p.act, ok);
      }
    }
  };
  auto load_a = [&](int kt) {
    const uint32_t slot = uint32_t(kt % Stages);
    const size_t k_off = size_t(kt) * kAtomsK;
    CUTE_UNROLL
    for (int i = 0; i < kAPerThread; ++i)
      cp_async_16(a_smem[i] + slot * kAStageBytes, a_src[i] + k_off * kAtomBytes, true);
    if (s_copier) cp_async_16(s_smem + slot * kSStageBytes, s_src + k_off * kAtomScaleBytes, true);
  };

  // ---- consumer state ------------------------------------------------------------------------
  typename G::Mma mma;
  auto thr_mma = mma.get_thread_slice(wg_tid);
  Tensor tCsB = thr_mma.partition_B(sB);          // (MMA, MMA_N, MMA_K, PIPE)
  Tensor tCrB = thr_mma.make_fragment_B(tCsB);    // smem descriptors
  // A fragments in the atom's value order (k+1, m+8, k+8) per k16 block; two, so one converts
  // while the other feeds the wgmma in flight.
  Tensor tCrA0 = make_tensor<bfloat16_t>(Shape<Shape<_2, _2, _2>, _1, Int<G::kKBlocks>>{});
  Tensor tCrA1 = make_tensor<bfloat16_t>(Shape<Shape<_2, _2, _2>, _1, Int<G::kKBlocks>>{});
  Tensor accum = partition_fragment_C(mma, Shape<_64, Int<BN>>{});
  clear(accum);
  mma.accumulate_ = GMMA::ScaleOut::One;

  const int warp = wg_tid / 32, lane = wg_tid % 32, g = lane / 4;

  // Widen one K tile of this warpgroup's weights from smem into an A fragment.
  auto convert = [&](auto& frag, int slot) {
    uint32_t* regs = reinterpret_cast<uint32_t*>(raw_pointer_cast(frag.data()));
    CUTE_UNROLL
    for (int ak = 0; ak < kAtomsK; ++ak) {
      const uint4 words = *reinterpret_cast<const uint4*>(&ss.a[slot][wg][ak][wg_tid * 16]);
      const uint32_t sw = *reinterpret_cast<const uint32_t*>(&ss.s[slot][wg][ak][warp * 32 + g * 4]);
      const uint32_t w4[4] = {words.x, words.y, words.z, words.w};
      // scale bytes: (row g, group 0), (row g+8, group 0), (row g, group 1), (row g+8, group 1)
      const uint32_t mul[4] = {scale_multiplier_bf16x2<0>(sw), scale_multiplier_bf16x2<1>(sw),
                               scale_multiplier_bf16x2<2>(sw), scale_multiplier_bf16x2<3>(sw)};
      CUTE_UNROLL
      for (int kk = 0; kk < 4; ++kk) {
        const int kg = kk / 2;  // which 32-wide scale group of the atom
        uint32_t out[4];
        e2m1x8_to_bf16x8(w4[kk], mul[2 * kg], mul[2 * kg + 1], out);
        CUTE_UNROLL
        for (int j = 0; j < 4; ++j) regs[(ak * 4 + kk) * 4 + j] = out[j];
      }
    }
  };

  auto mma_tile = [&](auto& frag, int slot) {
    warpgroup_fence_operand(frag);
    warpgroup_fence_operand(accum);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < G::kKBlocks; ++kb) {
      cute::gemm(mma, frag(_, _, kb), tCrB(_, _, kb, slot), accum);
    }
    warpgroup_commit_batch();
    warpgroup_fence_operand(accum);
  };

  // ---- mainloop: loads run kLoadDistance tiles ahead, one wgmma batch stays in flight --------
  // Prologue: weights first (they do not depend on the previous kernel), then the B rows. Stage
  // kt's group may hold later stages' weights too; waiting for it is only stronger.
  constexpr int D = G::kLoadDistance;
  CUTE_UNROLL
  for (int kt = 0; kt < D; ++kt)
    if (kt < G::kKTiles) load_a(kt);
  if (p.schedule_ready) pdl_wait();
  pdl_launch_dependents();
  CUTE_UNROLL
  for (int kt = 0; kt < D; ++kt) {
    if (kt < G::kKTiles) load_b(kt);
    cp_async_commit();
  }
  auto step = [&](auto& frag, int kt) {
    cp_async_wait<D - 1>();
    cutlass::arch::fence_view_async_shared();  // cp.async writes -> wgmma (async proxy) reads
    __syncthreads();
    if (kt + D < G::kKTiles) { load_a(kt + D); load_b(kt + D); }
    cp_async_commit();
    convert(frag, kt % Stages);
    mma_tile(frag, kt % Stages);
    warpgroup_wait<1>();  // the previous batch is done: its A registers and smem slot are free
    warpgroup_fence_operand(frag);
  };
  for (int kt = 0; kt < G::kKTiles; kt += 2) {
    step(tCrA0, kt);
    if (kt + 1 < G::kKTiles) step(tCrA1, kt + 1);
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(accum);

  // ---- epilogue ------------------------------------------------------------------------------
  Tensor tCcC = thr_mma.partition_C(make_identity_tensor(Shape<_64, Int<BN>>{}));
  const int row_base = m_tile * G::BM + wg * 64;
  Epilogue::apply(p, accum, tCcC, expert, row_base, row0, row_end);
}

// Host-side launch; grid.x covers the worst-case number of work tiles for `max_rows` rows.
template <class G, class Epilogue>
int launch_grouped_gemm(const GemmParams& p, int max_work, cudaStream_t stream) {
  auto kernel = grouped_gemm_kernel<G, Epilogue>;
  if (G::kSmemBytes > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::kSmemBytes);
    if (e != cudaSuccess) return int(e);
  }
  return int(launch_pdl(kernel, dim3(max_work, G::kMTiles), dim3(G::kThreads), G::kSmemBytes, stream, p));
}

}  // namespace moegen::sm90
