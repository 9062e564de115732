// Would widening the weights by a warpgroup of its own into shared memory (SS wgmmas) beat widening
// them in the consumers' registers (RS wgmmas, the GEMMs' scheme)?  DeepSeek-V4-Flash's BF16 GEMM
// tile at large T (m256n128k64: two consumer warpgroups, two 64-row slices each), compute only: the
// operands sit in shared memory from the start (no ring, no copies), every CTA loops over K tiles.
//   rs         A fragments from registers, never widened (the bound without widening);
//   rs-widen   the consumers widen each K tile's e2m1 words into their A fragments first (the
//              GEMMs' mainloop: tile kt's widening overlaps tile kt-1's wgmmas);
//   ss         A from shared memory (already bf16);
//   ss-widener ss, while a third warpgroup widens a K tile's worth of words per consumer K tile and
//              stores the bf16 values into a second A buffer (not synchronized with the consumers:
//              the traffic and issue slots that widening into shared memory would cost, not its
//              handshake, so an upper bound on what it could win);
//   rs-fill, rs-widen-fill   rs and rs-widen while a third warpgroup stores 24.5 KB per K tile into
//              shared memory (what the producers' copies write there per K tile: 16 KB of token rows,
//              8.5 KB of weights and scales).
// Results are garbage; the time counts.  docs/benchmarks.md, "Widening into shared memory".
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I<cutlass>/include \
//        lab/experiments/ss_widener_bench.cu -o /tmp/ssw && /tmp/ssw
#include <cute/arch/mma_sm90.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <algorithm>
#include <utility>
#include <vector>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));      \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

using namespace cute;
constexpr int BM = 256, BN = 128, BK = 64, kSlicesPerWg = 2, kKBlocks = BK / 16;
constexpr int kThreads = 384;
constexpr int kBBytes = BN * BK * 2;                 // 16 KB, SW128 K-major
constexpr int kABytes = BM * BK * 2;                 // 32 KB of bf16 weights per K tile
constexpr int kPackedBytes = BM * BK / 2;            // 8 KB of e2m1
enum Mode { kRs = 0, kRsWiden = 1, kSs = 2, kSsWidener = 3, kRsFill = 4, kRsWidenFill = 5 };
constexpr int kModes = 6;
const char* kNames[] = {"rs", "rs-widen", "ss", "ss-widener", "rs-fill", "rs-widen-fill"};

struct Smem {
  alignas(1024) uint8_t b[kBBytes];
  alignas(1024) uint8_t a[2][kABytes];  // bf16 A for ss (buffer 0 read, buffer 1 written by the widener)
  alignas(128) uint8_t packed[kPackedBytes];
  alignas(128) uint32_t scales[256];
};

// K-major SW128 descriptor: start address, SBO 1024 B (8-row groups), layout type 1 (128-byte swizzle).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_addr) {
  return uint64_t((smem_addr >> 4) & 0x3FFF) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

using OpRS = SM90::GMMA::MMA_64x128x16_F32BF16BF16_RS<SM90::GMMA::Major::K, SM90::GMMA::Major::K>;
using OpSS = SM90::GMMA::MMA_64x128x16_F32BF16BF16_SS<SM90::GMMA::Major::K, SM90::GMMA::Major::K>;
template <size_t... I>
__device__ __forceinline__ void mma_rs(const uint32_t* a, uint64_t b, float* d, std::index_sequence<I...>) {
  OpRS::fma(a[0], a[1], a[2], a[3], b, d[I]..., SM90::GMMA::ScaleOut::One);
}
template <size_t... I>
__device__ __forceinline__ void mma_ss(uint64_t a, uint64_t b, float* d, std::index_sequence<I...>) {
  OpSS::fma(a, b, d[I]..., SM90::GMMA::ScaleOut::One);
}

// The GEMMs' widening of one word (8 e2m1 values) into four bf16x2 registers (sm90/mxfp4_convert.cuh).
__device__ __forceinline__ uint32_t rotl(uint32_t x, int n) { return __funnelshift_l(x, x, n); }
__device__ __forceinline__ uint32_t mul_half(uint32_t a, uint32_t m, bool high) {
  const __nv_bfloat162 mm = *reinterpret_cast<__nv_bfloat162*>(&m);
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), high ? __high2bfloat162(mm) : __low2bfloat162(mm));
  return *reinterpret_cast<uint32_t*>(&r);
}
__device__ __forceinline__ void widen(uint32_t q, uint32_t pg, uint32_t pg8, bool g1, uint32_t (&out)[4]) {
  constexpr uint32_t kValue = 0x81C081C0u, kE1 = 0x01000100u;
  out[0] = mul_half(q & kValue, pg, g1);
  out[1] = mul_half(rotl(q, 4) & kValue, pg8, g1);
  out[2] = mul_half(rotl(q, 10) & kValue, pg, g1);
  out[3] = mul_half((rotl(q, 6) & (kValue & ~kE1)) | (rotl(q, 14) & kE1), pg8, g1);
}

template <int kMode>
__global__ void __launch_bounds__(kThreads, 1) tile_kernel(int k_tiles, float* sink) {
  extern __shared__ __align__(1024) uint8_t raw[];
  Smem& ss = *reinterpret_cast<Smem*>(raw);
  const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128;
  for (int i = tid; i < int(sizeof(Smem)) / 4; i += kThreads) reinterpret_cast<uint32_t*>(raw)[i] = 0x3c003c00u ^ (i * 0x9e3779b9u & 0x00ff00ffu);
  __syncthreads();
  const uint32_t b_addr = uint32_t(__cvta_generic_to_shared(ss.b));
  const uint32_t a_addr = uint32_t(__cvta_generic_to_shared(ss.a[0]));
  if (wg == 2) {
    cutlass::arch::warpgroup_reg_dealloc<56>();
    if constexpr (kMode == kSsWidener) {
      // Per consumer K tile: 8 KB of words in, 32 KB of bf16 out (16 words per thread, 16-byte stores).
      uint32_t dst = uint32_t(__cvta_generic_to_shared(ss.a[1])) + wtid * 16;
      for (int kt = 0; kt < k_tiles; ++kt) {
#pragma unroll 4
        for (int w = 0; w < 16; ++w) {
          const uint32_t q = *reinterpret_cast<const volatile uint32_t*>(&ss.packed[(w * 128 + wtid) * 4]);
          const uint32_t s = ss.scales[(w * 8 + wtid / 16) % 256];
          uint32_t o[4];
          widen(q, (s << 7) & 0x7F807F80u, (s >> 1) & 0x7F807F80u, w & 1, o);
          asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst + uint32_t(w) * 2048u), "r"(o[0]), "r"(o[1]),
                       "r"(o[2]), "r"(o[3])
                       : "memory");
        }
      }
    }
    if constexpr (kMode == kRsFill || kMode == kRsWidenFill) {
      // 24.5 KB per consumer K tile: 12 16-byte stores per thread (and a 13th by half of them).
      const uint32_t dst = uint32_t(__cvta_generic_to_shared(ss.a[1])) + wtid * 16;
      for (int kt = 0; kt < k_tiles; ++kt) {
#pragma unroll
        for (int w = 0; w < 13; ++w)
          if (w < 12 || wtid < 64)
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst + uint32_t(w) * 2048u), "r"(kt), "r"(w),
                         "r"(wtid), "r"(kt ^ w)
                         : "memory");
      }
    }
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<224>();
  float acc[kSlicesPerWg][64];
#pragma unroll
  for (int r = 0; r < kSlicesPerWg; ++r)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[r][i] = 0.f;
  uint32_t frag[2][kSlicesPerWg][kKBlocks * 4];
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int r = 0; r < kSlicesPerWg; ++r)
#pragma unroll
      for (int j = 0; j < kKBlocks * 4; ++j) frag[b][r][j] = 0x3c003c00u + j + 7 * r + 3 * b + wtid;
  const int warp = wtid / 32, lane = wtid % 32;
  auto step = [&](int kt, auto buf) {
    constexpr int B = decltype(buf)::value;
    if constexpr (kMode == kRsWiden || kMode == kRsWidenFill) {
      // As the GEMMs: one 16-byte load of words and one scale word per slice, 4 words x 4 registers.
#pragma unroll
      for (int r = 0; r < kSlicesPerWg; ++r) {
        uint32_t words[4];
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(words[0]), "=r"(words[1]), "=r"(words[2]), "=r"(words[3])
                     : "r"(uint32_t(__cvta_generic_to_shared(&ss.packed[((wg * 2 + r) * 128 + wtid) * 16 % kPackedBytes]))));
        const uint32_t s = ss.scales[(warp * 8 + lane / 4 + r * 32 + kt) % 256];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          uint32_t o[4];
          widen(words[kk], (s << 7) & 0x7F807F80u, (s >> 1) & 0x7F807F80u, kk >= 2, o);
#pragma unroll
          for (int j = 0; j < 4; ++j) frag[B][r][kk * 4 + j] = o[j];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kSlicesPerWg; ++r)
#pragma unroll
      for (int j = 0; j < kKBlocks * 4; ++j) asm volatile("" : "+r"(frag[B][r][j]));
#pragma unroll
    for (int r = 0; r < kSlicesPerWg; ++r)
#pragma unroll
      for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(acc[r][i])::"memory");
    warpgroup_arrive();
#pragma unroll
    for (int kb = 0; kb < kKBlocks; ++kb) {
      const uint64_t db = desc_sw128(b_addr + kb * 32);
#pragma unroll
      for (int r = 0; r < kSlicesPerWg; ++r) {
        if constexpr (kMode == kSs || kMode == kSsWidener) {
          // slice (wg, r): 64 rows = 8 KB of the K-major SW128 A tile
          const uint64_t da = desc_sw128(a_addr + uint32_t(wg * 2 + r) * 8192u + kb * 32);
          mma_ss(da, db, acc[r], std::make_index_sequence<64>{});
        } else {
          mma_rs(&frag[B][r][kb * 4], db, acc[r], std::make_index_sequence<64>{});
        }
      }
    }
    warpgroup_commit_batch();
    warpgroup_wait<1>();
#pragma unroll
    for (int r = 0; r < kSlicesPerWg; ++r)
#pragma unroll
      for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(acc[r][i])::"memory");
  };
  for (int kt = 0; kt < k_tiles; kt += 2) {
    step(kt, Int<0>{});
    step(kt + 1, Int<1>{});
  }
  warpgroup_wait<0>();
  float s = 0.f;
#pragma unroll
  for (int r = 0; r < kSlicesPerWg; ++r)
#pragma unroll
    for (int i = 0; i < 64; ++i) s += acc[r][i];
  if (s == 12345.f) sink[blockIdx.x] = s;  // keeps the accumulators alive
}

template <int kMode>
float run(int ctas, int k_tiles, float* sink, int reps) {
  auto k = tile_kernel<kMode>;
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Smem))));
  k<<<ctas, kThreads, sizeof(Smem)>>>(k_tiles, sink);
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a));
    k<<<ctas, kThreads, sizeof(Smem)>>>(k_tiles, sink);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float* sink;
  CHECK(cudaMalloc(&sink, 4096 * 4));
  const int k_tiles = 2048, reps = 7;
  const double flop = 2.0 * BM * BN * BK * k_tiles * sms;
  // Rounds of all modes in turn (the power state drifts); medians per mode.
  std::vector<std::vector<float>> ms(kModes);
  for (int round = 0; round < 3; ++round) {
    ms[0].push_back(run<0>(sms, k_tiles, sink, reps));
    ms[1].push_back(run<1>(sms, k_tiles, sink, reps));
    ms[2].push_back(run<2>(sms, k_tiles, sink, reps));
    ms[3].push_back(run<3>(sms, k_tiles, sink, reps));
    ms[4].push_back(run<4>(sms, k_tiles, sink, reps));
    ms[5].push_back(run<5>(sms, k_tiles, sink, reps));
  }
  printf("m256n128k64 tiles, one CTA per SM (%d), %d K tiles each\n", sms, k_tiles);
  for (int m = 0; m < kModes; ++m) {
    std::sort(ms[m].begin(), ms[m].end());
    const float t = ms[m][1];
    printf("%-13s %8.1f us  %6.1f TFLOP/s  (%.1f-%.1f us)\n", kNames[m], t * 1e3, flop / (t * 1e-3) / 1e12,
           ms[m].front() * 1e3, ms[m].back() * 1e3);
  }
  return 0;
}
