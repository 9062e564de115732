// Grouped GEMM for MoE experts on SM90: MXFP4 weights x BF16 activations (or, W4A8, x e4m3
// activations with per-row scales), FP32 accumulation.
//
// Swap-AB: the weight rows are the wgmma M side (64 per warpgroup, register-sourced A operand,
// widened from e2m1 in registers to bf16, or to e4m3 by table), tokens are the N side (B operand in
// shared memory).
// One CTA computes a BM x BN tile of  out^T[weight row, token row]  for one expert: blockIdx.x
// picks a work tile (expert, first token row) from the schedule the routing stage built on the
// device, and the weight-row tile.  A ring of `Stages` shared-memory slots feeds both operands:
// weights arrive by bulk copy in the layout moegen.prepare writes (contiguous 64x64 atoms),
// activations are gathered by row index with cp.async straight into the swizzled smem tile.
#pragma once
// Every wgmma N that is a multiple of 8 (not only CuTe's default subset): an expert's partly empty
// last tile runs one m64nNk16 per k step with N = its rows rounded up, not several narrower ones.
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif
#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "moegen/common.cuh"
#include "moegen/sm90/gemm_params.cuh"
#include "moegen/pdl.cuh"
#include "moegen/progress.cuh"
#include "moegen/sm90/epilogue.cuh"
#include "moegen/sm90/mxfp4_convert.cuh"

// The kernel's dynamic shared memory, named at file scope so inline PTX can take its address.
extern "C" __shared__ __align__(1024) uint8_t moegen_sm90_smem[];

namespace moegen::sm90 {
using namespace cute;

// Shared-window address of the dynamic shared memory.  `mov` of the symbol is a link-time constant,
// so wgmma descriptors built from it stay in uniform registers; built from a generic pointer
// (cvta.to.shared, a per-thread S2R) every wgmma paid two R2UR moves plus the adds.
__device__ __forceinline__ uint32_t smem_window_base() {
  uint32_t a;
  asm("mov.u32 %0, moegen_sm90_smem;" : "=r"(a));
  return a;
}

// wgmma with its accumulators passed one by one (the atom's fma takes N/2 float references).
// kAccumulate false: D = A B, discarding what the accumulators held.
template <class Op, bool kAccumulate = true, class Acc, size_t... I>
__device__ __forceinline__ void wgmma_rs(const uint32_t* a, uint64_t desc_b, Acc* acc, std::index_sequence<I...>) {
  Op::fma(a[0], a[1], a[2], a[3], desc_b, acc[I]..., kAccumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero);
}

// Prepared weight atoms: 64 weight rows x 64 K, 16 bytes of e2m1 per thread of a warpgroup.
constexpr int kAtomRows = 64;
constexpr int kAtomK = 64;
constexpr int kAtomBytes = 2048;
constexpr int kAtomScaleBytes = 128;  // [warp][g][(g,kg0) (g+8,kg0) (g,kg1) (g+8,kg1)]

// W4A8 widening table: entries for binades d = kWidenTableMinD .. 6 below/above the expert's residual
// (moegen.fp8: TABLE_MIN_D, FOLD_HEADROOM), 8 e4m3 magnitudes each.
constexpr int kWidenTableMinD = -13;
constexpr int kWidenTableEntries = 6 - kWidenTableMinD + 1;
constexpr int kWidenTableBytes = 8 * kWidenTableEntries;

constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }
constexpr int ceil_div(int x, int m) { return (x + m - 1) / m; }

// One kernel's tile and its register plan.  The plan (CTAs per SM the register budget must allow,
// and with two consumer warpgroups the setmaxnreg split between producer and consumers) comes from
// the config space's resource model (moegen/arch/sm90.py, launch_resources), which also prunes the
// space with it: one source for both.
template <int BM_, int BN_, int BK_, int Stages_, int MinBlocksPerSm_, int ProducerRegisters_, int ConsumerRegisters_,
          bool FullWidthLoop_ = false, int StepK_ = BK_, bool TileLoop_ = FullWidthLoop_>
struct TileShape {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, Stages = Stages_;
  // K per consumer step: a K tile is loaded as one slot, and widened and issued in BK / StepK steps,
  // each with its own A fragment.  Smaller steps halve the fragments' registers, so more CTAs fit an
  // SM (moegen/arch/sm90.py, step_k), without smaller copies.  Same wgmmas in the same order: same bits.
  static constexpr int StepK = StepK_;
  static_assert(BK % StepK == 0 && StepK % 64 == 0, "StepK: whole atoms dividing the K tile");
  // Loop over tiles (persistent grid) whatever the K loop's length, every tile at the full wgmma
  // width: with the narrower widths' instantiations in the loop too, ptxas keeps all their
  // addresses live across it and spills (W4A8 m128n128k128s4, 32 K tiles: 460-492 B).
  static constexpr bool kFullWidthLoop = FullWidthLoop_;
  // Loop over tiles (persistent grid) at all: the config space decides (moegen/arch/sm90.py,
  // persistent_tile_loop: short K loops, or the full-width loop).
  static constexpr bool kTileLoop = TileLoop_;
  static_assert(!kFullWidthLoop || kTileLoop, "the full-width loop is a tile loop");
  // 64-row weight slices (one m64 wgmma each) over at most two consumer warpgroups: a 256-row tile
  // gives each warpgroup two slices that share every B tile (half the activation reads of m128).
  static constexpr int kSlices = BM / 64;
  static constexpr int kConsumers = kSlices < 2 ? kSlices : 2;
  static constexpr int kSlicesPerConsumer = kSlices / kConsumers;
  static constexpr int kConsumerThreads = 128 * kConsumers;
  // One consumer warpgroup: one producer warp (a producer warpgroup's registers would halve the
  // CTAs an SM holds at decode).  Two: a producer warpgroup that hands registers to the consumers
  // with setmaxnreg (the accumulators of a 128 x 256 tile need them).
  static constexpr int kProducerWarps = kConsumers > 1 ? 4 : 1;
  static constexpr bool kRegisterHandoff = kConsumers > 1;
  static constexpr int kThreads = kConsumerThreads + 32 * kProducerWarps;
  static constexpr int kMinBlocksPerSm = MinBlocksPerSm_;
  static constexpr int kProducerRegisters = ProducerRegisters_;
  static constexpr int kConsumerRegisters = ConsumerRegisters_;
  static_assert(BM == 64 || BM == 128 || BM == 256, "BM: one, two or four 64-row slices");
  static_assert(BK % 64 == 0, "BK: whole prepared atoms along K");
  static_assert(BN % 8 == 0 && BN >= 8 && BN <= 256, "BN: a wgmma N");
  static_assert(Stages >= 3, "two slots are held by the wgmmas in flight; a third keeps loading");
  static_assert(kMinBlocksPerSm >= 1 && kMinBlocksPerSm * kThreads <= 2048, "CTAs per SM within the thread limit");
  static_assert(!kRegisterHandoff ||
                    (kProducerRegisters * 128 + kConsumerRegisters * kConsumerThreads) * kMinBlocksPerSm <= 65536,
                "the setmaxnreg split fits the register file at kMinBlocksPerSm CTAs per SM");
};

// N, K: the GEMM's true output rows and reduction length; NPad, KPad: the prepared tensor's padded
// sizes (the weight layout, moegen/layout.py).  Act: the B operand's type, bfloat16_t or (W4A8)
// float_e4m3_t; one wgmma step covers 32 bytes of K either way (k16 or k32), so a 128-byte swizzle
// row of the B tile is 64 or 128 K values and the ring's byte geometry is the same.
// ExpertProgress: whether the kernel carries the code of GemmParams::progress_add / progress_wait (the
// config space decides, per tile: moegen.arch.sm90.expert_progress).
template <class Tile_, int N, int K, int NPad, int KPad, class Epilogue_, class Act, bool ExpertProgress>
struct GroupedGemm {
  using Epilogue = Epilogue_;
  using ActType = Act;
  static constexpr bool kFp8 = std::is_same_v<Act, float_e4m3_t>;
  static constexpr bool kExpertProgress = ExpertProgress;
  static_assert(kFp8 || std::is_same_v<Act, bfloat16_t>, "activations: bf16 or e4m3");
  static_assert(kFp8 == Epilogue::kActScale, "e4m3 activations carry per-row scales into the epilogue");
  static_assert(!kFp8 || Tile_::BK == 128, "W4A8 promotes its partial sums once per K tile: one interval, 128");
  static constexpr int kActBytes = int(sizeof(Act));
  static constexpr int kMmaK = 32 / kActBytes;  // K of one wgmma
  static constexpr int BM = Tile_::BM, BN = Tile_::BN, BK = Tile_::BK, Stages = Tile_::Stages;
  static constexpr int kN = N, kK = K;  // true (unpadded) output rows and reduction length
  using Tiling = Tile_;
  static constexpr int kConsumers = Tile_::kConsumers, kThreads = Tile_::kThreads;
  static constexpr int kSlices = Tile_::kSlices, kSlicesPerConsumer = Tile_::kSlicesPerConsumer;
  static constexpr int kConsumerThreads = Tile_::kConsumerThreads;
  static constexpr int kKPad = KPad;
  static constexpr int kNPad = NPad;
  static_assert(kKPad % kAtomK == 0 && kKPad >= K && kNPad % kAtomRows == 0 && kNPad >= N, "padded atom grid");
  // The K loop ends on a whole consumer step: a K tile that BK / StepK steps would overrun holds the
  // steps that remain (gpt-oss: K = 2880 in 128-deep tiles ends in one 64-deep step), so such K keep
  // the 4 KB copies of 128-deep tiles.  The config space offers only BK that end so.
  static_assert(kKPad % BK % Tile_::StepK == 0, "the K loop must end on a whole consumer step");
  static constexpr int kKTiles = ceil_div(kKPad, BK);
  static constexpr bool kPartialLastTile = kKPad % BK != 0;
  // A CTA runs several tiles in a row (persistent grid) only if every tile starts at ring slot 0: the
  // consumer's K loop has compile-time slots.
  static constexpr bool kPersistent = Tile_::kTileLoop;
  static_assert(!kPersistent || kKTiles % Stages == 0, "a tile loop runs whole ring passes per tile");
  static constexpr bool kFullWidthLoop = Tile_::kFullWidthLoop;
  static_assert(!kFullWidthLoop || (kFp8 && kKTiles <= 32), "the full-width tile loop: W4A8, at most 32 K tiles");
  static constexpr int kMTiles = ceil_div(N, BM);
  static_assert(kMTiles * BM <= kNPad, "a CTA's weight rows must exist in the prepared tensor");
  static constexpr int kAtomsK = BK / kAtomK;
  static_assert((BK * kActBytes) % 128 == 0, "a K tile is whole 128-byte swizzle rows of B");
  static constexpr int kKBlocks = BK / kMmaK;  // wgmma steps per K tile
  static constexpr int kStepsK = BK / Tile_::StepK;  // consumer steps per K tile, an A fragment each
  static_assert(!kFp8 || kStepsK == 1, "W4A8 promotes once per K tile, after one step");
  static constexpr int kStepKBlocks = kKBlocks / kStepsK, kStepAtomsK = kAtomsK / kStepsK;
  static constexpr int kLastTileSteps = kPartialLastTile ? kKPad % BK / Tile_::StepK : kStepsK;
  static constexpr int kLastTileAtomsK = kLastTileSteps * kStepAtomsK;
  // A tile with fewer token rows runs a narrower wgmma: N in steps of kNStep, so the mainloop is
  // instantiated once per width.  An expert's last tile pads half a step on average: 256-wide BF16
  // tiles step by 32 (8 widths), which made gpt-oss-120b 2.3 % faster at T = 4096 (~128 rows per
  // expert) than steps of 64; 8 widths gained nothing measurable on 64- and 128-wide tiles (H200,
  // lab/findings.md, "Narrower widths for an expert's last tile").  The persistent tile loop keeps
  // 4: ptxas holds every instantiation's addresses live across its tiles.  W4A8 keeps 4 until measured.
  static constexpr int kNWidths = BN > 128 && !kFp8 && !kPersistent ? 8 : 4;
  static constexpr int kNStep = BN / kNWidths > 8 ? BN / kNWidths : 8;
  static_assert(BN % kNStep == 0, "wgmma widths are multiples of the step");

  using SmemLayoutB = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Act>{},
                                             make_shape(Int<BN>{}, Int<BK>{}, Int<Stages>{})));

  // Byte offsets of the B operand the consumers' descriptors use (start addresses are unswizzled):
  // k block kb at (kb % 4) * 32 + (kb / 4) * kBAtomColumnBytes, slot s at s * kBStageBytes.
  static constexpr int kBAtomColumnBytes = (BN / 8) * 1024;
  static constexpr int kBStageBytes = kActBytes * BN * BK;
  static constexpr bool b_offsets_match_cute() {
    constexpr auto layout = SmemLayoutB{}.layout_b();
    for (int kb = 0; kb < kKBlocks; ++kb)
      if (kActBytes * int(layout(0, kb * kMmaK, 0)) != (kb % 4) * 32 + (kb / 4) * kBAtomColumnBytes) return false;
    return Stages < 2 || kActBytes * int(layout(0, 0, 1)) == kBStageBytes;
  }
  static_assert(b_offsets_match_cute(), "B descriptor offsets disagree with CuTe's SW128 layout");

  struct SharedStorage {
    alignas(1024) Act b[cosize_v<SmemLayoutB>];
    alignas(128) uint8_t a[Stages][kSlices][kAtomsK][kAtomBytes];
    alignas(128) uint8_t s[Stages][kSlices][kAtomsK][kAtomScaleBytes];
    uint64_t full[Stages];   // weights (bulk copy bytes) + B rows (producer lanes' cp.async) landed
    uint64_t empty[Stages];  // every consumer thread's wgmma reading the slot retired
    // The tile's per-row epilogue factors ([BN][kRowFactors]: activation scales, routing weights),
    // double-buffered by tile parity.
    float row_factor[Epilogue::kRowFactors ? 2 : 1][Epilogue::kRowFactors ? BN * Epilogue::kRowFactors : 1];
    // W4A8: the e2m1 -> e4m3 widening table (moegen.fp8.widening_table), 8 bytes per binade.
    alignas(8) uint8_t widen_table[kFp8 ? kWidenTableBytes : 8];
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "SM90 gives a CTA at most 227 KiB of shared memory");
  // Token rows whose factors each consumer thread loads and stages in shared memory before the epilogue.
  static constexpr int kRowFactorsPerThread = Epilogue::kRowFactors ? ceil_div(BN, kConsumerThreads) : 0;
  static constexpr uint32_t kWeightBytesPerStage = kSlices * kAtomsK * (kAtomBytes + kAtomScaleBytes);
  static constexpr uint32_t kLastTileWeightBytes = kSlices * kLastTileAtomsK * (kAtomBytes + kAtomScaleBytes);

  // B copies: lane = (rr, kq) of producer warp w copies rows rr + 8 (w + W i) (one swizzle phase, so each destination
  // is a base + compile-time offset) and the 16-byte chunks kq, kq+4, ... of each row's BK values.
  static constexpr int kProducerWarps = Tile_::kProducerWarps;
  static_assert((BN / 8) % kProducerWarps == 0, "every producer warp copies the same number of rows");
  static constexpr int kBRowsPerLane = BN / 8 / kProducerWarps;
  static constexpr int kBChunksPerRow = BK * kActBytes / 16;
  static constexpr int kChunkValues = 16 / kActBytes;
  static constexpr int kBChunksPerLaneRow = kBChunksPerRow / 4;
};

__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem, bool valid) {
  int src_size = valid ? 16 : 0;  // zero-fill K past the end
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void bulk_copy_g2s(uint32_t smem, const void* gmem, uint32_t bytes, uint32_t mbar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(smem), "l"(gmem), "r"(bytes), "r"(mbar) : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t mbar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t mbar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(mbar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t mbar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(mbar) : "memory");
}
// Arrives once every cp.async this thread issued so far has landed (the count was set at init).
__device__ __forceinline__ void mbar_arrive_on_cp_async(uint32_t mbar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(mbar) : "memory");
}
// The suspend-time hint lets a waiting warp sleep until the phase flips instead of spinning on
// issue slots the widening needs.
__device__ __forceinline__ void mbar_wait(uint32_t mbar, uint32_t phase) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "wait_%=:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
      " @!done bra wait_%=;\n}\n" ::"r"(mbar), "r"(phase), "r"(0x989680) : "memory");
}

// One (work tile, weight-row tile) pair: the expert, its 0-based weight-row tile, the tile's first
// token row and the expert's end row.
struct WorkTile {
  int expert, m_tile, row0, row_end;
};

// What the epilogue needs besides the accumulators: the expert's scale and the per-row factors of the
// tile's token rows (GEMM2: routing weights; W4A8: the activation rows' scales), loaded once per tile
// (all in flight together) and staged in shared memory, where the epilogue reads them.  (Each
// element loading its own factor cost an L2 round trip per chunk of 16 between the stores; loading
// them when the tile starts, to land during the mainloop, kept registers live through it and spilled
// m128n64k128 and m64n128k64.)
//
// Consumer threads only (named barrier 1): `row_factors` is complete when this returns; the
// expert's scale (2^shift folded out of its e8m0 scales) is returned.
template <class G>
__device__ __forceinline__ float stage_epilogue_inputs(const GemmParams& p, const WorkTile& t, float* row_factors) {
  using Epilogue = typename G::Epilogue;
  const float expert_scale = __ldg(p.expert_scale + t.expert);
  if constexpr (G::kRowFactorsPerThread > 0) {
    constexpr int F = Epilogue::kRowFactors;
    float v[G::kRowFactorsPerThread][F];
    CUTE_UNROLL
    for (int i = 0; i < G::kRowFactorsPerThread; ++i) {
      const int j = int(threadIdx.x) + i * G::kConsumerThreads, row = t.row0 + j;
      const bool live = j < G::BN && row < t.row_end;
      if constexpr (Epilogue::kActScale) {
        const int src = live && p.act_row ? __ldcg(p.act_row + row) : row;
        v[i][0] = live ? __ldcg(p.act_scale + src) : 0.f;
      }
      if constexpr (Epilogue::kRoutingWeight) v[i][F - 1] = live ? __ldcg(p.row_weight + row) : 0.f;
    }
    CUTE_UNROLL
    for (int i = 0; i < G::kRowFactorsPerThread; ++i) {
      const int j = int(threadIdx.x) + i * G::kConsumerThreads;
      CUTE_UNROLL
      for (int f = 0; f < F; ++f)
        if (j < G::BN) row_factors[j * F + f] = v[i][f];
    }
    asm volatile("bar.sync 1, %0;\n" ::"r"(G::kConsumerThreads) : "memory");
  }
  return expert_scale;
}

// Consumer warpgroups for a tile whose token rows fit in NA <= BN columns: widen the weights, run
// the NA-wide wgmmas on the first NA rows of the B ring, release slots, then the epilogue.
template <class G, class Epilogue, int NA>
__device__ __forceinline__ void consume(const GemmParams& p, typename G::SharedStorage& ss, const WorkTile& t,
                                        float* row_factors, uint32_t full0, uint32_t empty0, uint32_t phase0) {
  using namespace cute;
  const int expert = t.expert, m_tile = t.m_tile, row0 = t.row0, row_end = t.row_end;
  constexpr int BK = G::BK, Stages = G::Stages, kKTiles = G::kKTiles, kAtomsK = G::kAtomsK;
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int wg_tid = tid % 128;
  auto full_bar = [&](int slot) { return full0 + 8u * uint32_t(slot); };
  auto empty_bar = [&](int slot) { return empty0 + 8u * uint32_t(slot); };

  using Act = typename G::ActType;
  using Mma = decltype(make_tiled_mma(SM90::GMMA::rs_op_selector<Act, Act, float, Shape<_64, Int<NA>, Int<BK>>>()));
  Tensor sB_all = make_tensor(make_smem_ptr(ss.b), typename G::SmemLayoutB{});
  // The first NA rows of every slot: 8-row groups keep their 1024-byte stride, so the sub-tile is
  // still a canonical K-major SW128 operand.
  Tensor sB = local_tile(sB_all, make_shape(Int<NA>{}, Int<BK>{}, Int<Stages>{}), make_coord(_0{}, _0{}, _0{}));
  Mma mma;
  auto thr_mma = mma.get_thread_slice(wg_tid);
  Tensor tCsB = thr_mma.partition_B(sB);          // (MMA, MMA_N, MMA_K, PIPE)
  Tensor tCrB = thr_mma.make_fragment_B(tCsB);    // smem descriptors
  // Per 64-row slice of this warpgroup: A fragments (4 registers per wgmma step: bf16 in the atom's
  // value order (k+1, m+8, k+8) per k16 block, or e4m3 bytes), two of them so one converts while the
  // other feeds the wgmma in flight; accumulators.
  constexpr int R = G::kSlicesPerConsumer;
  using FragA = std::conditional_t<G::kFp8, decltype(make_tensor<uint32_t>(Shape<Int<G::kStepKBlocks * 4>>{})),
                                   decltype(make_tensor<bfloat16_t>(Shape<Shape<_2, _2, _2>, _1, Int<G::kStepKBlocks>>{}))>;
  using Accum = decltype(partition_fragment_C(mma, Shape<_64, Int<NA>>{}));
  struct Frags { FragA f[R]; };  // (a generic lambda taking `auto (&)[R]` crashes cudafe++ 13.0)
  Frags tCrA0, tCrA1;
  Accum accum[R];
  CUTE_UNROLL
  for (int r = 0; r < R; ++r) clear(accum[r]);
  // FP8 wgmma keeps only about 14 bits of its accumulator's mantissa as it adds (DeepSeek-V3's
  // report; on the H200 the layer measured 1.2-1.4e-2 against its float64 reference with one
  // accumulator over K = 4096): each K tile's wgmmas start fresh in `part`, which FP32 adds then
  // promote into `accum` (DeepGEMM's promotion), once per K tile.  The interval changes the bits, so
  // every W4A8 kernel has the same one (BK = 128, asserted in GroupedGemm): batch invariance.
  Accum part[G::kFp8 ? R : 1];
  if constexpr (G::kFp8) {
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) clear(part[r]);
  }
  auto promote = [&]() MOEGEN_INLINE {
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) {
      warpgroup_fence_operand(part[r]);
      warpgroup_fence_operand(accum[r]);
      CUTE_UNROLL
      for (int i = 0; i < size(accum[r]); ++i) accum[r](i) += part[r](i);
      warpgroup_fence_operand(accum[r]);
    }
  };

  const int warp = wg_tid / 32, lane = wg_tid % 32, g = lane / 4;

  // Widen one K tile of this warpgroup's weights (slice r of its R) from smem into an A fragment.
  auto convert = [&](auto& frag, int slot, int r, int h) MOEGEN_INLINE {
    uint32_t* regs = reinterpret_cast<uint32_t*>(raw_pointer_cast(frag.data()));
    const int slice = wg * R + r;
    CUTE_UNROLL
    for (int ak = 0; ak < G::kStepAtomsK; ++ak) {
      const int atom = h * G::kStepAtomsK + ak;
      const uint4 words = *reinterpret_cast<const uint4*>(&ss.a[slot][slice][atom][wg_tid * 16]);
      const uint32_t sw = *reinterpret_cast<const uint32_t*>(&ss.s[slot][slice][atom][warp * 32 + g * 4]);
      const uint32_t w4[4] = {words.x, words.y, words.z, words.w};
      if constexpr (G::kFp8) {
        // Word kk: 32-group kk / 2 of row g (kk even) or g + 8, whose table entry is scale byte kk.
        // It fills registers kk % 2 and kk % 2 + 2 of the atom's k32 step kk / 2.
        const uint2* table = reinterpret_cast<const uint2*>(ss.widen_table);
        CUTE_UNROLL
        for (int kk = 0; kk < 4; ++kk) {
          const int reg = (ak * 2 + kk / 2) * 4 + kk % 2;
          e2m1x8_to_e4m3x8(w4[kk], table[(sw >> (8 * kk)) & 0xFFu], regs[reg], regs[reg + 2]);
        }
      } else {
        // scale bytes: (row g, group 0), (row g+8, group 0), (row g, group 1), (row g+8, group 1)
        const uint32_t pair_g = scale_pair_rows_g(sw), pair_g8 = scale_pair_rows_g8(sw);
        CUTE_UNROLL
        for (int kk = 0; kk < 4; ++kk) {
          uint32_t out[4];  // words 0, 1: the atom's first 32-wide scale group; 2, 3: its second
          if (kk < 2) e2m1x8_to_bf16x8<false>(w4[kk], pair_g, pair_g8, out);
          else e2m1x8_to_bf16x8<true>(w4[kk], pair_g, pair_g8, out);
          CUTE_UNROLL
          for (int j = 0; j < 4; ++j) regs[(ak * 4 + kk) * 4 + j] = out[j];
        }
      }
    }
  };

  // B descriptors: CuTe's for (k block 0, slot 0) gives the layout fields (high word, and the low
  // word's bits above the start address); the start address is the window base plus compile-time
  // offsets (the K loop below unrolls over the ring, so slots are constants too).  ptxas then
  // builds them with uniform adds instead of a per-thread add and two R2UR moves per wgmma.
  using Op = decltype(SM90::GMMA::rs_op_selector<Act, Act, float, Shape<_64, Int<NA>, Int<G::kMmaK>>>());
  constexpr int kAccRegs = NA / 2;  // m64nNA fp32 accumulator registers per thread
  static_assert(decltype(size(Accum{}))::value == kAccRegs, "accumulator layout");
  static_assert(decltype(size<1>(typename MMA_Traits<Op>::Shape_MNK{}))::value == NA,
                "one wgmma covers the tile's width (CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED must precede CuTe)");
  const uint64_t desc00 = uint64_t(tCrB(0, 0, 0, 0));
  const uint32_t desc_hi = uint32_t(desc00 >> 32);
  const uint32_t desc_lo = (uint32_t(desc00) & ~0x3FFFu) |
                           (((smem_window_base() + uint32_t(offsetof(typename G::SharedStorage, b))) >> 4) & 0x3FFFu);
  auto mma_tile = [&](Frags& frags, auto slot, int h, uint32_t desc_lo) MOEGEN_INLINE {
    FragA* frag = frags.f;
    Accum* acc = G::kFp8 ? part : accum;
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) {
      warpgroup_fence_operand(frag[r]);
      warpgroup_fence_operand(acc[r]);
    }
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < G::kStepKBlocks; ++kb) {
      const int kbt = h * G::kStepKBlocks + kb;  // wgmma step within the K tile
      const uint32_t offset = uint32_t(decltype(slot)::value * G::kBStageBytes + (kbt % 4) * 32 +
                                       (kbt / 4) * G::kBAtomColumnBytes);
      const uint64_t desc = (uint64_t(desc_hi) << 32) | (desc_lo + offset / 16);
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) {  // the slices share the B tile: same descriptor
        const uint32_t* a = reinterpret_cast<const uint32_t*>(raw_pointer_cast(frag[r].data())) + kb * 4;
        if (G::kFp8 && kb == 0)
          wgmma_rs<Op, false>(a, desc, raw_pointer_cast(acc[r].data()), std::make_index_sequence<kAccRegs>{});
        else
          wgmma_rs<Op>(a, desc, raw_pointer_cast(acc[r].data()), std::make_index_sequence<kAccRegs>{});
      }
    }
    warpgroup_commit_batch();
    CUTE_UNROLL
    for (int r = 0; r < R; ++r) warpgroup_fence_operand(acc[r]);
  };

  // One wgmma batch stays in flight: step kt's widening overlaps step kt-1's wgmma, and tile kt-1's
  // slot goes back to the producer once its last step's wgmma retired.  With several steps per K tile
  // they alternate the two A fragments in order, whatever the tile's parity.
  // `steps`: the consumer steps this K tile holds (fewer only in a partial last tile).
  auto step = [&](Frags& frags, int kt, auto slot, uint32_t phase, uint32_t desc_lo, auto steps) MOEGEN_INLINE {
    // The phase flip orders the producer's cp.async and bulk writes before this warpgroup's reads
    // (as in CUTLASS's cp.async warp-specialized GMMA mainloop); a proxy fence here would cost a
    // MEMBAR.ALL.CTA per K tile.
    mbar_wait(full_bar(slot), phase);
    if constexpr (G::kFp8) {
      FragA* frag = frags.f;
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) convert(frag[r], slot, r, 0);
      // Tile kt-1's wgmmas retire and their partial sums join `accum` (zeros at kt = 0) before
      // tile kt's start over in `part`; tile kt's widening above still overlapped them.
      warpgroup_wait<0>();
      promote();
      if (kt > 0) mbar_arrive(empty_bar((decltype(slot)::value + Stages - 1) % Stages));
      mma_tile(frags, slot, 0, desc_lo);
      return;
    }
    static_for<decltype(steps)::value>([&](auto hh) MOEGEN_INLINE {
      constexpr int h = decltype(hh)::value;
      Frags& fr = G::kStepsK == 1 ? frags : (h % 2 == 0 ? tCrA0 : tCrA1);
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) convert(fr.f[r], slot, r, h);
      mma_tile(fr, slot, h, desc_lo);
      warpgroup_wait<1>();
      CUTE_UNROLL
      for (int r = 0; r < R; ++r) warpgroup_fence_operand(fr.f[r]);
      if (h == 0 && kt > 0) mbar_arrive(empty_bar((decltype(slot)::value + Stages - 1) % Stages));
    });
  };
  // Unrolled over the ring (twice for an odd ring, so the two A fragments alternate too): every
  // slot index is a compile-time constant.  Whole rounds in a loop, the remainder as a static tail:
  // a runtime `kt < kKTiles` inside the wgmma pipeline makes ptxas serialize the wgmmas (C7513).
  constexpr int kUnroll = Stages % 2 == 0 ? Stages : 2 * Stages;
  // ends_loop: the round's last step is the K loop's last tile, which may be partial.
  auto round = [&](int k0, uint32_t phase, auto count, auto ends_loop) MOEGEN_INLINE {
    // Opaque per round: ptxas would otherwise hoist all Stages x kKBlocks descriptors out of the
    // loop into registers (a spill at m64n32k128), instead of adding the constants at each use.
    uint32_t lo = desc_lo;
    asm volatile("" : "+r"(lo));
    static_for<decltype(count)::value>([&](auto u) MOEGEN_INLINE {
      constexpr int U = decltype(u)::value;
      const uint32_t ph = phase ^ uint32_t((U / Stages) & 1);
      constexpr bool kLast = decltype(ends_loop)::value && U + 1 == decltype(count)::value;
      constexpr int kSteps = kLast ? G::kLastTileSteps : G::kStepsK;
      if constexpr (U % 2 == 0) step(tCrA0, k0 + U, Int<U % Stages>{}, ph, lo, Int<kSteps>{});
      else step(tCrA1, k0 + U, Int<U % Stages>{}, ph, lo, Int<kSteps>{});
    });
  };
  constexpr uint32_t kRoundPhaseFlip = uint32_t((kUnroll / Stages) & 1);
  uint32_t phase = phase0;  // parity of the ring pass the round's first K tile reads
  // A tail of one K tile made ptxas serialize the wgmmas too (C7513: gpt-oss's 45 K tiles at s4 and
  // s8 with BK = 64): it runs as the last whole round's extra step instead.
  // A partial last tile is never in the loop: its round runs as the static tail.
  constexpr int kTail = kKTiles % kUnroll == 0 && G::kPartialLastTile ? kUnroll : kKTiles % kUnroll;
  constexpr bool kTailJoinsLastRound = kTail == 1 && kKTiles > kUnroll;
  constexpr int kLoopTiles = kKTiles - kTail - (kTailJoinsLastRound ? kUnroll : 0);
  for (int k0 = 0; k0 + kUnroll <= kLoopTiles; k0 += kUnroll) {
    round(k0, phase, Int<kUnroll>{}, false_type{});
    phase ^= kRoundPhaseFlip;
  }
  if constexpr (kTailJoinsLastRound) round(kLoopTiles, phase, Int<kUnroll + 1>{}, true_type{});
  else if constexpr (kTail > 0) round(kKTiles - kTail, phase, Int<kTail>{}, true_type{});
  warpgroup_wait<0>();
  if constexpr (G::kFp8) promote();
  // The last slot goes back too: the producer refills the ring for this CTA's next tile while the
  // epilogue runs.
  mbar_arrive(empty_bar((kKTiles - 1) % Stages));
  const float expert_scale = stage_epilogue_inputs<G>(p, t, row_factors);
  Tensor tCcC = thr_mma.partition_C(make_identity_tensor(Shape<_64, Int<NA>>{}));
  CUTE_UNROLL
  for (int r = 0; r < R; ++r) {
    warpgroup_fence_operand(accum[r]);
    Epilogue::apply(p, accum[r], tCcC, expert, m_tile * G::BM + (wg * R + r) * 64, row0, row_end,
                    expert_scale, row_factors);
  }
}

// Runs consume<.., I * kNStep> for the tile's width in steps (one branch per CTA, uniform).
template <class G, class Epilogue, int I>
__device__ __forceinline__ void consume_dispatch(const GemmParams& p, typename G::SharedStorage& ss, int steps,
                                                 const WorkTile& t, float* row_factors, uint32_t full0,
                                                 uint32_t empty0, uint32_t phase0) {
  if constexpr (I * G::kNStep >= G::BN || G::kFullWidthLoop) {
    consume<G, Epilogue, G::BN>(p, ss, t, row_factors, full0, empty0, phase0);
  } else {
    if (steps <= I) consume<G, Epilogue, I * G::kNStep>(p, ss, t, row_factors, full0, empty0, phase0);
    else consume_dispatch<G, Epilogue, I + 1>(p, ss, steps, t, row_factors, full0, empty0, phase0);
  }
}

// Warp-specialized: warps 0..4C-1 are C consumer warpgroups (widen weights, wgmma, epilogue), the
// rest produce.  Per K tile one producer lane (of warp kt % W) bulk-copies each consumer's contiguous
// weight atoms and scales (one instruction each, counted in bytes on the slot's `full` barrier)
// and all producer lanes gather the token rows with cp.async, arriving on `full` when theirs land.
// Consumers release a slot through `empty` once the wgmma that read it retired: no CTA-wide
// barrier in the K loop, and loads run up to Stages tiles ahead of the tensor cores.
//
// Tiles are (work tile, weight-row tile) pairs; CTA b runs tiles b, b + gridDim.x, ...  With a grid
// of one CTA per tile that is one tile each; a persistent grid (as many CTAs as fit on the GPU,
// G::kPersistent) keeps the ring streaming across tiles: the producer loads the next tile while
// the consumers run the epilogue, and no CTA pays a launch, barrier setup and first-load latency
// per tile.
template <class G, class Epilogue>
__global__ void __launch_bounds__(G::kThreads, G::Tiling::kMinBlocksPerSm) grouped_gemm_kernel(GemmParams p) {
  using namespace cute;
  constexpr int BN = G::BN, BK = G::BK, Stages = G::Stages, K = G::kK, kKTiles = G::kKTiles;
  auto& ss = *reinterpret_cast<typename G::SharedStorage*>(moegen_sm90_smem);

  // Launched early (PDL): GEMM2 may read its schedule and stream weights while GEMM1 drains; its
  // B rows (GEMM1's output) wait for pdl_wait().  L2-only loads: the schedule is rewritten per call.
  if (!p.schedule_ready) pdl_wait();
  // CTAs of one work tile (all its weight-row tiles) are consecutive: they run together and share
  // its token rows through L2, which then come from HBM once rather than once per row tile.
  const int num_tiles = __ldcg(p.num_work) * G::kMTiles;
  if (int(blockIdx.x) >= num_tiles) return;  // the grid is sized for the worst routing; idle CTAs leave
  // One L2 round trip: the schedule holds each work tile's end row, so it need not be looked up by
  // expert (offsets[expert + 1]) in a second round trip.
  auto load_tile = [&](int tile) {
    const int work = tile / G::kMTiles;
    return WorkTile{__ldcg(p.work_expert + work), tile % G::kMTiles, __ldcg(p.work_row0 + work),
                    __ldcg(p.work_row_end + work)};
  };
  const int tid = threadIdx.x;

  const uint32_t full0 = smem_window_base() + uint32_t(offsetof(typename G::SharedStorage, full));
  const uint32_t empty0 = smem_window_base() + uint32_t(offsetof(typename G::SharedStorage, empty));
  auto full_bar = [&](int slot) { return full0 + 8u * uint32_t(slot); };
  auto empty_bar = [&](int slot) { return empty0 + 8u * uint32_t(slot); };

  // Token rows past an expert's end are never copied.  Their columns of the product are never
  // stored, so whatever a slot holds there is harmless; zeroing the ring once keeps them defined.
  {
    uint4* b_words = reinterpret_cast<uint4*>(ss.b);
    constexpr int kWords = int(sizeof(ss.b) / sizeof(uint4));
    for (int i = tid; i < kWords; i += G::kThreads) b_words[i] = make_uint4(0, 0, 0, 0);
  }
  if constexpr (G::kFp8) {  // the widening table: byte m of entry i is e4m3(magnitude m * 2^(i + min d))
    static_assert(G::kThreads >= kWidenTableBytes, "one thread per table byte");
    if (tid < kWidenTableBytes) {
      // e2m1 magnitude m (exponent m >> 1, mantissa m & 1): 0, 0.5, 1, 1.5, 2, 3, 4, 6, times 2^d: exact
      const int m = tid % 8, e = m >> 1;
      const float magnitude = e == 0 ? 0.5f * float(m & 1) : ldexpf(1.f + 0.5f * float(m & 1), e - 1);
      const float v = ldexpf(magnitude, tid / 8 + kWidenTableMinD);
      ss.widen_table[tid] = uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));  // nearest even
    }
  }
  if (tid == 0) {
    for (int s = 0; s < Stages; ++s) {
      mbar_init(full_bar(s), 32 * G::kProducerWarps);  // the producer lanes' cp.async arrivals
      mbar_init(empty_bar(s), G::kConsumerThreads);  // every consumer thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int tile_stride = int(gridDim.x);  // kernels that are not kPersistent run one tile (the host sizes the grid so)

  if (tid >= G::kConsumerThreads) {
    // ================================ producer warp(s) ================================
    if constexpr (G::Tiling::kRegisterHandoff) cutlass::arch::warpgroup_reg_dealloc<G::Tiling::kProducerRegisters>();
    const int lane = tid % 32, pwarp = (tid - G::kConsumerThreads) / 32;
    constexpr int kAtomsK = G::kAtomsK;
    constexpr int kAtomsKTotal = G::kKPad / kAtomK;
    constexpr int kPrologue = Stages < kKTiles ? Stages : kKTiles;
    // Slot kt's weights are issued by lane 0 of producer warp kt % W.  One thread issuing every
    // slot bounds the stream: a bulk copy blocks its thread ~86 cycles, expect_tx and the empty wait
    // ~70-140 more (clock64 in tools/experiments/stream_bench.cu, H200), so one thread moved ~4 KB
    // per ~550 cycles (2.8 TB/s at two CTAs per SM, weights only); warps issue in parallel.
    auto issues_weights = [&](int kt) { return lane == 0 && pwarp == kt % G::kProducerWarps; };
    // This lane's rows rr + 8 (pwarp + W i) and chunks kq + 4 h: one swizzle phase (rr), so the
    // destination of (i, h) is a per-lane base plus compile-time offsets (SW128: chunk' = chunk ^ row % 8).
    const int rr = lane / 4, kq = lane % 4;
    const uint32_t b_base = static_cast<uint32_t>(__cvta_generic_to_shared(ss.b)) + (rr + 8 * pwarp) * 128 +
                            ((kq ^ rr) * 16);
    constexpr uint32_t kRowStepBytes = 1024u * G::kProducerWarps;
    constexpr uint32_t kBStageBytes = G::kBStageBytes;
    constexpr uint32_t kKAtomBytes = G::kBAtomColumnBytes;  // one 64-wide K column of the tile
    uint32_t pass = 0;  // ring passes completed before this tile (each tile is kKTiles / Stages of them)
    for (int tile = blockIdx.x; tile < num_tiles; tile += tile_stride) {
      const bool first = tile == int(blockIdx.x);
      const WorkTile t = load_tile(tile);
      const size_t atom0 = (size_t(t.expert) * (G::kNPad / kAtomRows) + size_t(t.m_tile) * G::kSlices) * kAtomsKTotal;
      auto issue_weights = [&](int kt) {
        const int slot = kt % Stages;
        const bool last_partial = G::kPartialLastTile && kt == kKTiles - 1;  // the atoms that remain
        const uint32_t atoms = last_partial ? G::kLastTileAtomsK : kAtomsK;
        mbar_expect_tx(full_bar(slot), last_partial ? G::kLastTileWeightBytes : G::kWeightBytesPerStage);
        CUTE_UNROLL
        for (int c = 0; c < G::kSlices; ++c) {  // each 64-row slice's atoms are contiguous along K
          const size_t atom = atom0 + size_t(c) * kAtomsKTotal + size_t(kt) * kAtomsK;
          bulk_copy_g2s(static_cast<uint32_t>(__cvta_generic_to_shared(&ss.a[slot][c][0][0])),
                        p.w + atom * kAtomBytes, atoms * kAtomBytes, full_bar(slot));
          bulk_copy_g2s(static_cast<uint32_t>(__cvta_generic_to_shared(&ss.s[slot][c][0][0])),
                        p.w_scales + atom * kAtomScaleBytes, atoms * kAtomScaleBytes, full_bar(slot));
        }
      };
      if (first) {
        // Weights never depend on the previous kernel: the first tile's start before pdl_wait.
        CUTE_UNROLL
        for (int kt = 0; kt < kPrologue; ++kt)
          if (issues_weights(kt)) issue_weights(kt);
        if (p.schedule_ready && !(G::kExpertProgress && p.progress_wait)) pdl_wait();
        pdl_launch_dependents();
      }
      if (G::kExpertProgress && p.progress_wait) {
        // This tile's B rows are one expert's rows of the previous kernel's output (BF16: GEMM1's `h`;
        // W4A8: the quantizer's e4m3 `h`): wait for that expert's rows only, all of them, since the
        // counter sums whatever finished first (a prefix of the count is not a prefix of the rows).
        if (lane == 0)
          progress_wait_until(p.progress_wait + t.expert,
                              (unsigned long long)(__ldcg(p.expert_row0 + t.expert + 1) -
                                                   __ldcg(p.expert_row0 + t.expert)) * p.progress_per_row);
        __syncwarp();
      }
      // Byte pointers: a 16-byte chunk is 8 bf16 or 16 e4m3 values (G::kChunkValues).
      const uint8_t* act = static_cast<const uint8_t*>(p.act);
      const uint8_t* row_src[G::kBRowsPerLane];
      CUTE_UNROLL
      for (int i = 0; i < G::kBRowsPerLane; ++i) {
        const int r = t.row0 + rr + 8 * (pwarp + G::kProducerWarps * i);
        row_src[i] = r < t.row_end ? act + (size_t(p.act_row ? __ldcg(p.act_row + r) : r) * K + kq * G::kChunkValues) *
                                               G::kActBytes
                                   : nullptr;
      }
      for (int kt = 0; kt < kKTiles; ++kt) {
        const int slot = kt % Stages;
        // The slot's previous fill (this tile's, or an earlier tile's) must have been consumed.
        const uint32_t fills = pass * (kKTiles / Stages) + uint32_t(kt / Stages);  // earlier fills of this slot
        if (fills > 0) mbar_wait(empty_bar(slot), (fills - 1) & 1);
        if ((!first || kt >= kPrologue) && issues_weights(kt)) issue_weights(kt);
        const int k0 = kt * BK;
        CUTE_UNROLL
        for (int h = 0; h < G::kBChunksPerLaneRow; ++h) {
          const int k = k0 + (kq + 4 * h) * G::kChunkValues;
          const bool k_ok = (K % BK == 0) || k < K;  // K past the end is zero-filled
          const uint32_t dst = ((b_base ^ uint32_t((h % 2) * 64)) + uint32_t(h / 2) * kKAtomBytes) +
                               uint32_t(slot) * kBStageBytes;
          const size_t src_offset = size_t(k0 + 4 * G::kChunkValues * h) * G::kActBytes;
          CUTE_UNROLL
          for (int i = 0; i < G::kBRowsPerLane; ++i)
            if (row_src[i]) cp_async_16(dst + i * kRowStepBytes, k_ok ? row_src[i] + src_offset : act, k_ok);
        }
        mbar_arrive_on_cp_async(full_bar(slot));
      }
      if constexpr (!G::kPersistent) break;  // one tile: no loop state for ptxas to keep alive
      ++pass;
    }
    return;
  }

  // ================================ consumer warpgroups ================================
  if constexpr (G::Tiling::kRegisterHandoff) cutlass::arch::warpgroup_reg_alloc<G::Tiling::kConsumerRegisters>();
  // The epilogue reads routing outputs, which predate GEMM1, and (W4A8 GEMM2) the `h` scales: per
  // expert, the producer's acquire of the quantizer's count orders them before the ring's full barriers.
  if (p.schedule_ready && !(G::kExpertProgress && p.progress_wait)) pdl_wait();
  pdl_launch_dependents();
  uint32_t pass = 0;
  for (int tile = blockIdx.x; tile < num_tiles; tile += tile_stride) {
    const WorkTile t = load_tile(tile);
    // An expert's last tile is usually partly empty: run the narrowest wgmma N that covers its rows.
    const int rows = min(BN, t.row_end - t.row0);
    // Parity of the ring pass this tile's first K tile reads (kKTiles / Stages passes per tile).
    const uint32_t phase0 = (pass * uint32_t(kKTiles / Stages)) & 1u;
    consume_dispatch<G, Epilogue, 1>(p, ss, (rows + G::kNStep - 1) / G::kNStep, t,
                                     &ss.row_factor[Epilogue::kRowFactors ? pass & 1 : 0][0], full0, empty0, phase0);
    if (G::kExpertProgress && p.progress_add) {
      asm volatile("bar.sync 1, %0;\n" ::"r"(G::kConsumerThreads) : "memory");  // every consumer's stores
      if (tid == 0) {
        const int weight_rows = min(G::BM, G::kN - t.m_tile * G::BM);
        progress_release_add(p.progress_add + t.expert, (unsigned long long)rows * (unsigned long long)weight_rows);
      }
    }
    if constexpr (!G::kPersistent) break;  // one tile (gemm2 k128s6 spilled 124-324 B holding the loop)
    ++pass;
  }
}

// CTAs of `kernel` that fit on the current device at once (for the persistent grid).  `cache` must be
// the caller's own (one per kernel): a function-local static here would be one per template
// specialization, and every GEMM kernel has the same pointer type, so all kernels of the library
// would share the first one's count.  Atomic: threads may launch concurrently (each stores the same
// count).
template <class Kernel>
int resident_ctas(Kernel kernel, int threads, int smem_bytes, std::atomic<int> (&cache)[64]) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 0;
  int fit = cache[device].load(std::memory_order_relaxed);
  if (fit == 0) {
    int per_sm = 0, sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      return 0;
    fit = per_sm * sms;
    cache[device].store(fit, std::memory_order_relaxed);
  }
  return fit;
}

// GEMM grids are persistent (as many CTAs as fit, each running a strided list of tiles) from this
// many expert rows (tokens x top_k) up, one CTA per tile below.  H200, deepseek-v4-flash, the same
// tuned kernels in both modes: persistent 1313 / 3393 / 9580 us at T = 1024 / 4096 / 16384 against
// 1500 / 3549 / 9602; at T <= 256 one CTA per tile was as fast or faster (T = 4: 105 against 115 us).
constexpr long kPersistentGridMinRows = 4096;

// MOEGEN_GRID=tiles | persistent overrides the choice (a switch for benchmarking the two).
inline bool persistent_grid(long rows) {
  static const int mode = [] {
    const char* v = getenv("MOEGEN_GRID");
    if (v && strcmp(v, "tiles") == 0) return 0;
    if (v && strcmp(v, "persistent") == 0) return 1;
    return -1;
  }();
  return mode >= 0 ? mode == 1 : rows >= kPersistentGridMinRows;
}

// Host-side launch; the grid covers the worst-case number of work tiles x the weight-row tiles, or,
// persistent, at most as many CTAs as fit on the GPU.
template <class G, class Epilogue>
int launch_grouped_gemm(const GemmParams& p, int max_work, long rows, cudaStream_t stream) {
  auto kernel = grouped_gemm_kernel<G, Epilogue>;
  if (G::kSmemBytes > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::kSmemBytes);
    if (e != cudaSuccess) return int(e);
  }
  long blocks = long(max_work) * G::kMTiles;
  if (G::kPersistent && persistent_grid(rows)) {
    static std::atomic<int> resident_cache[64] = {};  // per device ordinal; this function is one per kernel
    const int fit = resident_ctas(kernel, G::kThreads, G::kSmemBytes, resident_cache);
    if (fit > 0 && fit < blocks) blocks = fit;
  }
  if (blocks > 0x7fffffffL) return int(cudaErrorInvalidConfiguration);
  return int(launch_pdl(kernel, dim3(unsigned(blocks)), dim3(G::kThreads), G::kSmemBytes, stream, p));
}

}  // namespace moegen::sm90
