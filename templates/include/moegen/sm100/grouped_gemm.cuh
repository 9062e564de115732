// SM100 grouped GEMM for MoE experts: MXFP4 weights x MXFP8 activations, FP32 accumulation, BF16 out,
// with CUTLASS 4.2's block-scaled pointer-array collectives (tcgen05 kind::mxf8f6f4, tensor memory):
// everything that touches tcgen05 is NVIDIA's tested code; ours is the glue around it.
//
// Swap-AB as on SM90: A = the expert's weights [n_out, k] (K-major e2m1, M = output features, tile
// BM 128 on one SM or 256 on two), B = its tokens [rows, k] (K-major e4m3, N = tokens, tile BN).  D is
// column-major: D(feature, token) lands at out[token][feature].  Problem shapes, pointers, strides and
// scale layouts are device arrays a small kernel writes from the routing's per-expert offsets, so
// nothing returns to the host (CUTLASS's grouped scheduler reads them on the device; its alignment
// checks need host shapes, so the layout guarantees them: K % 128 == 0, 32-byte aligned FP4 rows).
#pragma once
#include <atomic>

#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/detail/sm100_blockscaled_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>
#include <type_traits>

#include "moegen/sm100/gemm_args.h"

namespace moegen::sm100 {
using namespace cute;

template <int BM, int BN, int BK>
struct GroupedGemm {
  static_assert(BM == 128 || BM == 256, "BM: one SM (128) or a 2-SM pair (256)");
  static_assert(BN == 64 || BN == 128 || BN == 256, "BN: a tcgen05 N the block-scaled collective takes");
  static_assert(BK % 128 == 0, "BK: whole 128-element FP4 TMA boxes");
  static constexpr bool k2Sm = BM == 256;
  using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
  using ElementA = cutlass::mx_float4_t<cutlass::float_e2m1_t>;
  using LayoutA = cutlass::layout::RowMajor;
  static constexpr int kAlignmentA = 128;  // the FP4 TMA format: 64 bytes
  using ElementB = cutlass::mx_float8_t<cutlass::float_e4m3_t>;
  using LayoutB = cutlass::layout::ColumnMajor;
  static constexpr int kAlignmentB = 16;
  using ElementD = cutlass::bfloat16_t;
  using LayoutD = cutlass::layout::ColumnMajor;
  static constexpr int kAlignmentD = 8;
  using MmaTileShape = Shape<Int<BM>, Int<BN>, Int<BK>>;
  using ClusterShape = Shape<Int<k2Sm ? 2 : 1>, _1, _1>;
  using KernelSchedule = std::conditional_t<k2Sm, cutlass::gemm::KernelPtrArrayTmaWarpSpecialized2SmMxf8f6f4Sm100,
                                            cutlass::gemm::KernelPtrArrayTmaWarpSpecialized1SmMxf8f6f4Sm100>;
  using EpilogueSchedule = std::conditional_t<k2Sm, cutlass::epilogue::PtrArrayTmaWarpSpecialized2Sm,
                                              cutlass::epilogue::PtrArrayTmaWarpSpecialized1Sm>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, MmaTileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignmentD, ElementD,
      LayoutD*, kAlignmentD, EpilogueSchedule>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm100, cutlass::arch::OpClassBlockScaledTensorOp, ElementA, LayoutA*, kAlignmentA, ElementB,
      LayoutB*, kAlignmentB, float, MmaTileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideC = typename Kernel::InternalStrideC;
  using StrideD = typename Kernel::InternalStrideD;
  using LayoutSFA = typename CollectiveMainloop::InternalLayoutSFA;
  using LayoutSFB = typename CollectiveMainloop::InternalLayoutSFB;
  using ScaleConfig = typename CollectiveMainloop::Sm1xxBlkScaledConfig;
  using ElementSF = typename Kernel::ElementSF;
  using DataA = typename Gemm::ElementA;
  using DataB = typename Gemm::ElementB;
  static_assert(ScaleConfig::SFVecSize == 32, "one e8m0 scale per 32 along K");

  // The device arrays CUTLASS reads, carved from the launch's scratch.
  struct Arrays {
    Shape3* shapes;
    const DataA** a;
    StrideA* sa;
    const DataB** b;
    StrideB* sb;
    const ElementSF** sfa;
    LayoutSFA* lsfa;
    const ElementSF** sfb;
    LayoutSFB* lsfb;
    ElementD** d;
    StrideD* sd;
    StrideC* sc;
  };
};

// One thread per group: its shape, pointers, strides and scale layouts (M = n_out, N = its tokens).
template <class G>
__global__ void fill_group_args(GroupedGemmArgs a, typename G::Arrays arr) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= a.groups) return;
  const int M = a.n_out, N = a.offsets[g + 1] - a.offsets[g], K = a.k;
  arr.shapes[g] = make_shape(M, N, K);
  arr.a[g] = reinterpret_cast<const typename G::DataA*>(a.weights + g * a.weights_group_bytes);
  arr.b[g] = reinterpret_cast<const typename G::DataB*>(a.tokens + long(a.offsets[g]) * K);
  arr.sfa[g] = reinterpret_cast<const typename G::ElementSF*>(a.weight_sf + g * a.weight_sf_group_bytes);
  arr.sfb[g] = reinterpret_cast<const typename G::ElementSF*>(a.token_sf + long(a.token_sf_rows[g]) * (K / 32));
  arr.d[g] = reinterpret_cast<typename G::ElementD*>(a.out + long(a.offsets[g]) * M);
  arr.sa[g] = cutlass::make_cute_packed_stride(typename G::StrideA{}, make_shape(M, K, 1));
  arr.sb[g] = cutlass::make_cute_packed_stride(typename G::StrideB{}, make_shape(N, K, 1));
  arr.sc[g] = cutlass::make_cute_packed_stride(typename G::StrideC{}, make_shape(M, N, 1));
  arr.sd[g] = cutlass::make_cute_packed_stride(typename G::StrideD{}, make_shape(M, N, 1));
  arr.lsfa[g] = G::ScaleConfig::tile_atom_to_shape_SFA(make_shape(M, N, K, 1));
  arr.lsfb[g] = G::ScaleConfig::tile_atom_to_shape_SFB(make_shape(M, N, K, 1));
}

inline int sm_count() {
  static std::atomic<int> cache[64] = {};  // atomic: threads may launch concurrently
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 0;
  int sms = cache[device].load(std::memory_order_relaxed);
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
    cache[device].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

// The device arrays of `groups` groups carved from base (256-byte aligned each); returns the bytes they
// take, where CUTLASS's workspace starts (the host-side test passes any base: only the size counts).
template <class G>
size_t carve_arrays(typename G::Arrays& arr, uint8_t* base, int groups) {
  size_t off = 0;
  auto take = [&](auto*& ptr) {
    off = (off + 255) / 256 * 256;
    ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(base + off);
    off += size_t(groups) * sizeof(*ptr);
  };
  take(arr.shapes), take(arr.a), take(arr.sa), take(arr.b), take(arr.sb), take(arr.sfa), take(arr.lsfa),
      take(arr.sfb), take(arr.lsfb), take(arr.d), take(arr.sd), take(arr.sc);
  return (off + 255) / 256 * 256;
}

// CUTLASS's arguments over the device arrays (shapes on the device only: CUTLASS never sees them here).
template <class G>
typename G::Gemm::Arguments gemm_arguments(const typename G::Arrays& arr, int groups, int device, int sms) {
  typename G::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = typename G::ProblemShape{groups, arr.shapes, nullptr};
  args.mainloop = {arr.a, arr.sa, arr.b, arr.sb, arr.sfa, arr.lsfa, arr.sfb, arr.lsfb};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = arr.sc;
  args.epilogue.ptr_D = arr.d;
  args.epilogue.dD = arr.sd;
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sms;
  return args;
}

// Host launch: fill the device arrays (a plain launch: CUTLASS's scheduler reads the shapes before it
// waits on a programmatic predecessor), then CUTLASS's initialize (tensor maps, workspace) and run.
template <class G>
int launch_grouped_gemm(const GroupedGemmArgs& a, cudaStream_t stream) {
  using Gemm = typename G::Gemm;
  typename G::Arrays arr{};
  uint8_t* base = static_cast<uint8_t*>(a.scratch);
  const size_t off = carve_arrays<G>(arr, base, a.groups);
  int device = 0;
  cudaGetDevice(&device);
  typename Gemm::Arguments args = gemm_arguments<G>(arr, a.groups, device, sm_count());
  const size_t workspace = Gemm::get_workspace_size(args);
  // before anything is written into scratch
  if (off + workspace > a.scratch_bytes) return launch_failure(kStepScratch, 0);
  fill_group_args<G><<<(a.groups + 127) / 128, 128, 0, stream>>>(a, arr);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return int(e);
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status != cutlass::Status::kSuccess) return launch_failure(kStepCanImplement, int(status));
  status = gemm.initialize(args, base + off, stream);
  if (status != cutlass::Status::kSuccess) return launch_failure(kStepInitialize, int(status));
  status = gemm.run(stream);
  if (status != cutlass::Status::kSuccess) return launch_failure(kStepRun, int(status));
  return int(cudaGetLastError());
}

}  // namespace moegen::sm100
