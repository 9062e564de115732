// Can the two CTAs of a cluster share their token rows, and what would it save?  The streaming part
// of DeepSeek-V4-Flash's BF16 GEMM1 at large T (m256n128k64, an 8-deep ring, one CTA per SM), with no
// widening and no wgmma (the consumers only wait for each slot and release it), moving the token rows
// four ways:
//   gather      the GEMM's scheme: 16-byte cp.async per producer lane into the SW128 slot;
//   tma-row     one 2D TMA box per token row (1 row x 64 K, SWIZZLE_128B) by the producer lanes;
//   tma-mcast   the same in 2-CTA clusters whose CTAs run adjacent weight-row tiles of one token
//               tile: each CTA loads half the rows and multicasts them into both;
//   gather-cl   gather, launched in 2-CTA clusters (does the cluster launch alone cost?);
//   none        no token rows: the weights alone (the bound for any sharing);
//   box         the token rows copied into expert order first (`permute`, timed apart), then one TMA
//               box (128 rows x 64 K) per slot;
//   box-mcast   the same in 2-CTA clusters, each CTA loading a 64-row box and multicasting it.
// Every mode checks one slot of every CTA it samples against the swizzled layout the wgmma reads.
// docs/benchmarks.md, "Token rows shared by TMA multicast".
//
// Standalone:  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//                   lab/experiments/tma_row_multicast_bench.cu -o /tmp/tmab && /tmp/tmab
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e = (x);                                                                \
    if (e != cudaSuccess) {                                                             \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));           \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

constexpr int H = 4096;                        // GEMM1's K
constexpr int N = 4096;                        // GEMM1's weight rows per expert (gate and up)
constexpr int kExperts = 256, kTopK = 6;
constexpr int BM = 256, BN = 128, BK = 64, Stages = 8;
constexpr int kMTiles = N / BM, kKTiles = H / BK;
constexpr int kSlices = BM / 64;
constexpr int kAtomBytes = 2048, kScaleBytes = 128;  // one 64 x 64 e2m1 atom and its scales
constexpr int kBStage = BN * BK * 2;
constexpr int kAStage = kSlices * (kAtomBytes + kScaleBytes);
constexpr int kConsumerWarps = 8, kProducerThreads = 128;
constexpr int kThreads = kConsumerWarps * 32 + kProducerThreads;
constexpr int kCheckKt = 5;  // the K tile whose slot a sampled CTA copies out

enum Mode { kGather = 0, kTmaRow = 1, kTmaMulticast = 2, kGatherCluster = 3, kNone = 4, kBox = 5, kBoxMulticast = 6 };
constexpr int kModes = 7;
const char* kModeNames[] = {"gather", "tma-row", "tma-mcast", "gather-cl", "none", "box", "box-mcast"};
__host__ __device__ constexpr bool is_cluster(int m) { return m == kTmaMulticast || m == kGatherCluster || m == kBoxMulticast; }

struct Smem {
  alignas(1024) uint8_t b[Stages][kBStage];
  alignas(128) uint8_t a[Stages][kAStage];
  uint64_t full[Stages], empty[Stages];
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint32_t b, uint32_t n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(n));
}
__device__ __forceinline__ void mbar_wait(uint32_t b, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n w_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1, %2;\n @!p bra w_%=;\n}\n" ::"r"(b),
      "r"(parity), "r"(0x989680)
      : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t b, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
}
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t b_cluster) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(b_cluster) : "memory");
}
__device__ __forceinline__ uint32_t peer_address(uint32_t smem, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem), "r"(rank));
  return r;
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_arrive(uint32_t b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(b) : "memory");
}
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(b)
               : "memory");
}
__device__ __forceinline__ void tma_row(uint32_t dst, const CUtensorMap* map, int k, int row, uint32_t b) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(map), "r"(k), "r"(row), "r"(b)
      : "memory");
}
__device__ __forceinline__ void tma_row_multicast(uint32_t dst, const CUtensorMap* map, int k, int row, uint32_t b,
                                                  uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;" ::"r"(dst),
      "l"(map), "r"(k), "r"(row), "r"(b), "h"(mask)
      : "memory");
}

// One CTA per (work tile, weight-row tile); work tile w = (expert, 128-row token tile), m-tile fastest,
// so a cluster's two CTAs share the work tile.
template <int kMode>
__global__ void __launch_bounds__(kThreads, 1)
    stream_kernel(const __grid_constant__ CUtensorMap map, const uint8_t* x, const int* row_token,
                  const int* work_row0, const int* work_rows, const uint8_t* w, const uint8_t* w_scales,
                  uint8_t* check_out, int check_every, int rows_per_expert) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  Smem& ss = *reinterpret_cast<Smem*>(smem_raw);
  constexpr bool kCluster = is_cluster(kMode);
  constexpr bool kBoxes = kMode == kBox || kMode == kBoxMulticast;
  constexpr bool kTma = kMode == kTmaRow || kMode == kTmaMulticast || kBoxes;
  const int tid = threadIdx.x;
  const int tile = blockIdx.x, work = tile / kMTiles, m_tile = tile % kMTiles;
  const int row0 = work_row0[work], rows = work_rows[work];
  if (tid == 0) {
    for (int s = 0; s < Stages; ++s) {
      // gather: every producer lane arrives on `full` when its copies land; TMA: one arrival with the bytes
      mbar_init(smem_u32(&ss.full[s]), kTma ? 1 : (kMode == kNone ? 1 : kProducerThreads));
      mbar_init(smem_u32(&ss.empty[s]), kConsumerWarps * (kCluster && kMode != kGatherCluster ? 2 : 1));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if constexpr (kCluster) cluster_sync();
  const uint32_t rank = kCluster ? cluster_rank() : 0;

  if (tid >= kConsumerWarps * 32) {
    const int ptid = tid - kConsumerWarps * 32, lane = ptid % 32, pwarp = ptid / 32;
    // Weights: the expert's (the contents do not matter; its token tiles read the same ones, as in
    // the GEMM), a slice's atoms contiguous along K as in the prepared layout.
    const size_t atom0 = (size_t(row0 / rows_per_expert) * kMTiles + m_tile) * kSlices * kKTiles;
    // gather lanes (as the GEMM): rows rr + 8 (pwarp + 4 i), chunks kq and kq + 4
    const int rr = lane / 4, kq = lane % 4;
    const uint8_t* src[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = rr + 8 * (pwarp + 4 * i);
      src[i] = r < rows ? x + (size_t(row_token[row0 + r]) * H + kq * 8) * 2 : nullptr;
    }
    // TMA: lane ptid loads row ptid (tma-row), or rank r's half (tma-mcast)
    const int my_row = ptid;
    const bool tma_mine = kMode == kTmaRow ? my_row < rows
                                           : (my_row < rows && (my_row / (BN / 2)) == int(rank));
    const int my_token = tma_mine ? row_token[row0 + my_row] : 0;
    // A box always lands whole (rows past the tile are the next tile's, or zeros past the end).
    const uint32_t bytes_b = kBoxes ? uint32_t(BN) * 128u
                             : kMode == kNone || kMode == kGather || kMode == kGatherCluster ? 0u
                                                                                             : uint32_t(rows) * 128u;
    for (int kt = 0; kt < kKTiles; ++kt) {
      const int slot = kt % Stages;
      const uint32_t full = smem_u32(&ss.full[slot]);
      if (kt >= Stages) mbar_wait(smem_u32(&ss.empty[slot]), ((kt / Stages) - 1) & 1);
      if (lane == 0 && pwarp == kt % 4) {  // the GEMM's issuer: lane 0 of warp kt % 4
        if (kTma || kMode == kNone) mbar_arrive_expect_tx(full, uint32_t(kAStage) + bytes_b);
        else mbar_expect_tx(full, uint32_t(kAStage));
#pragma unroll
        for (int c = 0; c < kSlices; ++c) {
          const size_t atom = atom0 + size_t(c) * kKTiles + kt;
          bulk_g2s(smem_u32(&ss.a[slot][c * kAtomBytes]), w + atom * kAtomBytes, kAtomBytes, full);
          bulk_g2s(smem_u32(&ss.a[slot][kSlices * kAtomBytes + c * kScaleBytes]), w_scales + atom * kScaleBytes,
                   kScaleBytes, full);
        }
      }
      if constexpr (kMode == kGather || kMode == kGatherCluster) {
        const uint32_t base = smem_u32(&ss.b[slot][0]) + (rr + 8 * pwarp) * 128 + ((kq ^ rr) * 16);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (src[i]) cp_async_16((base ^ uint32_t(h * 64)) + i * 4096, src[i] + (kt * BK + h * 32) * 2);
        cp_async_arrive(full);
      } else if constexpr (kBoxes) {
        if (ptid == 32) {  // another warp's lane than the weights' issuer of even K tiles
          if constexpr (kMode == kBox) tma_row(smem_u32(&ss.b[slot][0]), &map, kt * BK, row0, full);
          else tma_row_multicast(smem_u32(&ss.b[slot][0]) + rank * (BN / 2) * 128, &map, kt * BK,
                                 row0 + int(rank) * (BN / 2), full, uint16_t(3));
        }
      } else if constexpr (kTma) {
        if (tma_mine) {
          const uint32_t dst = smem_u32(&ss.b[slot][0]) + (my_row / 8) * 1024 + (my_row % 8) * 128;
          if constexpr (kMode == kTmaRow) tma_row(dst, &map, kt * BK, my_token, full);
          else tma_row_multicast(dst, &map, kt * BK, my_token, full, uint16_t(3));
        }
      }
    }
  } else {
    const int warp = tid / 32, lane = tid % 32;
    const bool check = check_out && (tile % check_every) == 0 && warp == 0;
    for (int kt = 0; kt < kKTiles; ++kt) {
      const int slot = kt % Stages;
      mbar_wait(smem_u32(&ss.full[slot]), (kt / Stages) & 1);
      if (check && kt == kCheckKt) {
        const uint4* s = reinterpret_cast<const uint4*>(&ss.b[slot][0]);
        uint4* d = reinterpret_cast<uint4*>(check_out + size_t(tile / check_every) * kBStage);
        for (int i = lane; i < kBStage / 16; i += 32) d[i] = s[i];
      }
      __syncwarp();
      if (lane == 0) {
        mbar_arrive(smem_u32(&ss.empty[slot]));
        if constexpr (kCluster && kMode != kGatherCluster) mbar_arrive_cluster(peer_address(smem_u32(&ss.empty[slot]), rank ^ 1u));
      }
    }
  }
  if constexpr (kCluster) cluster_sync();  // the peer still writes into this CTA's slots and barriers
}

// Token rows into expert order (what the box modes read): one warp per row.
__global__ void permute_rows(const uint8_t* x, const int* row_token, int rows, uint8_t* xp) {
  const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const uint4* src = reinterpret_cast<const uint4*>(x + size_t(row_token[row]) * H * 2);
  uint4* dst = reinterpret_cast<uint4*>(xp + size_t(row) * H * 2);
  for (int i = lane; i < H * 2 / 16; i += 32) dst[i] = src[i];
}

typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

template <int kMode>
float run(const CUtensorMap& map, const uint8_t* x, const int* row_token, const int* work_row0, const int* work_rows,
          int num_work, const uint8_t* w, const uint8_t* ws, uint8_t* check_out, int check_every, int reps,
          int rows_per_expert) {
  auto kernel = stream_kernel<kMode>;
  const int smem = int(sizeof(Smem));
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (is_cluster(kMode))
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 0));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(num_work * kMTiles);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 2;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = is_cluster(kMode) ? 1 : 0;
  // The first launch copies out the sampled slots; the timed ones do not.
  CHECK(cudaLaunchKernelEx(&cfg, kernel, map, x, row_token, work_row0, work_rows, w, ws, check_out, check_every,
                                rows_per_expert));
  CHECK(cudaDeviceSynchronize());
  std::vector<float> times;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(a));
    CHECK(cudaLaunchKernelEx(&cfg, kernel, map, x, row_token, work_row0, work_rows, w, ws, (uint8_t*)nullptr, 1,
                                  rows_per_expert));
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int main(int argc, char** argv) {
  const int tokens = argc > 1 ? atoi(argv[1]) : 16384;
  const int reps = argc > 2 ? atoi(argv[2]) : 9;
  const int rows_per_expert = tokens * kTopK / kExperts;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // Work tiles: every expert's rows in 128-row tiles, each row a random token.
  std::vector<int> row0, rows, row_token(size_t(kExperts) * rows_per_expert);
  srand(12345);
  for (auto& t : row_token) t = rand() % tokens;
  for (int e = 0; e < kExperts; ++e)
    for (int r = 0; r < rows_per_expert; r += BN) {
      row0.push_back(e * rows_per_expert + r);
      rows.push_back(std::min(BN, rows_per_expert - r));
    }
  const int num_work = int(row0.size());
  const size_t x_bytes = size_t(tokens) * H * 2;
  std::vector<uint8_t> hx(x_bytes);
  for (size_t i = 0; i < x_bytes; ++i) hx[i] = uint8_t(rand());
  uint8_t *x, *w, *ws, *check;
  int *d_row_token, *d_row0, *d_rows;
  const size_t w_atoms = size_t(kExperts) * kMTiles * kSlices * kKTiles;
  CHECK(cudaMalloc(&x, x_bytes));
  CHECK(cudaMemcpy(x, hx.data(), x_bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&w, w_atoms * kAtomBytes));
  CHECK(cudaMalloc(&ws, w_atoms * kScaleBytes));
  CHECK(cudaMemset(w, 1, w_atoms * kAtomBytes));
  CHECK(cudaMemset(ws, 2, w_atoms * kScaleBytes));
  CHECK(cudaMalloc(&d_row_token, row_token.size() * 4));
  CHECK(cudaMalloc(&d_row0, num_work * 4));
  CHECK(cudaMalloc(&d_rows, num_work * 4));
  CHECK(cudaMemcpy(d_row_token, row_token.data(), row_token.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_row0, row0.data(), num_work * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_rows, rows.data(), num_work * 4, cudaMemcpyHostToDevice));
  const int check_every = 37;
  const int checked = (num_work * kMTiles + check_every - 1) / check_every;
  CHECK(cudaMalloc(&check, size_t(checked) * kBStage));

  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
  const int total_rows = int(row_token.size());
  uint8_t* xp;
  CHECK(cudaMalloc(&xp, size_t(total_rows) * H * 2));
  // Maps: token rows by token (1-row boxes), and the expert-ordered copy (128- and 64-row boxes).
  auto encode = [&](CUtensorMap* map, void* base, int rows_in_map, int box_rows) {
    const cuuint64_t dims[2] = {cuuint64_t(H), cuuint64_t(rows_in_map)};
    const cuuint64_t strides[1] = {cuuint64_t(H) * 2};
    const cuuint32_t box[2] = {BK, cuuint32_t(box_rows)}, elem[2] = {1, 1};
    CUresult rc = reinterpret_cast<EncodeTiled>(fn)(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box,
                                                    elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc != CUDA_SUCCESS) {
      printf("cuTensorMapEncodeTiled: %d\n", int(rc));
      exit(1);
    }
  };
  CUtensorMap map, map_box, map_half;
  encode(&map, x, tokens, 1);
  encode(&map_box, xp, total_rows, BN);
  encode(&map_half, xp, total_rows, BN / 2);
  permute_rows<<<(total_rows + 7) / 8, 256>>>(x, d_row_token, total_rows, xp);
  CHECK(cudaDeviceSynchronize());

  double token_bytes = 0;
  for (int i = 0; i < num_work; ++i) token_bytes += double(rows[i]) * H * 2 * kMTiles;
  const double weight_bytes = double(num_work) * kMTiles * kSlices * kKTiles * (kAtomBytes + kScaleBytes);
  const double weight_distinct = double(w_atoms) * (kAtomBytes + kScaleBytes);
  printf("T = %d: %d work tiles x %d weight-row tiles = %d CTAs (%d SMs); token rows %.2f GB into smem, weights %.2f GB (%.2f GB distinct)\n",
         tokens, num_work, kMTiles, num_work * kMTiles, sms, token_bytes / 1e9, weight_bytes / 1e9, weight_distinct / 1e9);

  // Rounds of all modes in turn (the GPU's power state drifts between them), medians per mode.
  std::vector<uint8_t> got(size_t(checked) * kBStage);
  const int rounds = reps < 3 ? 1 : 3;
  std::vector<std::vector<float>> ms(kModes + 1);
  cudaEvent_t ea, eb;
  CHECK(cudaEventCreate(&ea));
  CHECK(cudaEventCreate(&eb));
  for (int round = 0; round < rounds; ++round)
    for (int m = 0; m <= kModes; ++m) {
      if (m == kModes) {  // the permuted copy alone
        for (int r = 0; r < reps; ++r) {
          CHECK(cudaEventRecord(ea));
          permute_rows<<<(total_rows + 7) / 8, 256>>>(x, d_row_token, total_rows, xp);
          CHECK(cudaEventRecord(eb));
          CHECK(cudaEventSynchronize(eb));
          float t;
          CHECK(cudaEventElapsedTime(&t, ea, eb));
          ms[m].push_back(t);
        }
        continue;
      }
      CHECK(cudaMemset(check, 0xEE, size_t(checked) * kBStage));
      float t = 0;
      switch (m) {
        case 0: t = run<0>(map, x, d_row_token, d_row0, d_rows, num_work, w, ws, check, check_every, reps, rows_per_expert); break;
        case 1: t = run<1>(map, x, d_row_token, d_row0, d_rows, num_work, w, ws, check, check_every, reps, rows_per_expert); break;
        case 2: t = run<2>(map, x, d_row_token, d_row0, d_rows, num_work, w, ws, check, check_every, reps, rows_per_expert); break;
        case 3: t = run<3>(map, x, d_row_token, d_row0, d_rows, num_work, w, ws, check, check_every, reps, rows_per_expert); break;
        case 4: t = run<4>(map, x, d_row_token, d_row0, d_rows, num_work, w, ws, check, check_every, reps, rows_per_expert); break;
        case 5: t = run<5>(map_box, x, d_row_token, d_row0, d_rows, num_work, w, ws, check, check_every, reps, rows_per_expert); break;
        case 6: t = run<6>(map_half, x, d_row_token, d_row0, d_rows, num_work, w, ws, check, check_every, reps, rows_per_expert); break;
      }
      ms[m].push_back(t);
      if (round > 0 || m == kNone) continue;
      // Every sampled CTA's slot at K tile kCheckKt must hold row r's 16-byte chunk c at its SW128 place.
      CHECK(cudaMemcpy(got.data(), check, got.size(), cudaMemcpyDeviceToHost));
      long bad = 0, compared = 0;
      for (int i = 0; i < checked; ++i) {
        const int work = i * check_every / kMTiles;
        for (int r = 0; r < rows[work]; ++r)
          for (int c = 0; c < 8; ++c) {
            const size_t off = size_t(i) * kBStage + (r / 8) * 1024 + (r % 8) * 128 + ((c ^ (r % 8)) * 16);
            const uint8_t* want = hx.data() + (size_t(row_token[row0[work] + r]) * H + kCheckKt * BK + c * 8) * 2;
            bad += memcmp(got.data() + off, want, 16) != 0;
            ++compared;
          }
      }
      printf("%-10s layout %s (%ld of %ld sampled chunks wrong)\n", kModeNames[m], bad ? "WRONG" : "ok", bad, compared);
    }
  for (int m = 0; m <= kModes; ++m) {
    std::sort(ms[m].begin(), ms[m].end());
    printf("%-10s %9.1f us (%.1f-%.1f)\n", m == kModes ? "permute" : kModeNames[m], ms[m][ms[m].size() / 2] * 1e3, ms[m].front() * 1e3,
           ms[m].back() * 1e3);
  }
  return 0;
}
