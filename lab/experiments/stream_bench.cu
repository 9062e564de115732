// How fast can bulk copies (cp.async.bulk, the GEMMs' weight path) stream HBM on this GPU, as a
// function of the copy size, the slots in flight per CTA, CTAs per SM and the slot hand-off?
// Standalone (no CUTLASS):  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a
//   tools/experiments/stream_bench.cu -o /tmp/stream_bench && /tmp/stream_bench
// Each CTA streams its own contiguous share of a 4 GiB buffer (beyond L2) through a ring of
// `slots` shared-memory slots, `copies` bulk copies of `bytes` each per slot, with one mbarrier per
// slot.  hand-off 0: the issuing thread itself waits for a slot to land before refilling it (the
// least latency a ring can add); 1: a consumer warp waits for `full` and arrives on `empty`, and the
// producer waits for `empty` (the GEMMs' ring, with nothing done between the two).  `issuers`
// threads (lanes of one warp: stride 1, or lane 0 of separate warps: stride 32) share the issuing.
// A second sweep (gemm-like) adds what the GEMMs' rings also carry: token rows gathered with
// cp.async into each slot, a consumer releasing a slot one fill late, and one CTA per 64-slot tile
// against a persistent grid, with three ways of sharing the slots among producer warps.
// `stream_bench gemm` runs only that sweep.  H200 results: docs/benchmarks.md (571c3a1's section).
// In this ring, warps owning their slots streamed twice as fast; in the GEMMs they were slower,
// since the ring lacks the GEMMs' L2 traffic of token rows and their eight consumer warps.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <algorithm>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ __forceinline__ void mbar_init(uint32_t mbar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t mbar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mbar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t mbar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mbar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t mbar, uint32_t phase) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "wait_%=:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}\n" ::"r"(mbar), "r"(phase) : "memory");
}
__device__ __forceinline__ void bulk_copy(uint32_t smem, const void* gmem, uint32_t bytes, uint32_t mbar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(smem), "l"(gmem), "r"(bytes), "r"(mbar) : "memory");
}

extern __shared__ __align__(128) uint8_t smem[];

__global__ void stream_kernel(const uint8_t* src, size_t bytes_per_cta, int slot_bytes, int copies, int slots,
                              int handoff, int issuers, int issuer_stride, unsigned long long* sink,
                              unsigned long long* cycles) {
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full0 = base + uint32_t(slots * slot_bytes), empty0 = full0 + 8u * uint32_t(slots);
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) { mbar_init(full0 + 8 * s, 1); mbar_init(empty0 + 8 * s, 32); }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const uint8_t* my = src + size_t(blockIdx.x) * bytes_per_cta;
  const int n = int(bytes_per_cta / size_t(slot_bytes));
  const int copy_bytes = slot_bytes / copies;
  const int producer_threads = issuers * issuer_stride;
  const int consumer0 = (producer_threads + 31) / 32 * 32;  // the consumer warp follows the producer warp(s)
  const int t = int(threadIdx.x);
  if (t < producer_threads) {
    if (t % issuer_stride == 0) {  // issuer j owns fills j, j + issuers, ... (slots is a multiple of issuers)
      const int j = t / issuer_stride;
      unsigned long long wait_cycles = 0, issue_cycles = 0;
      for (int i = j; i < n; i += issuers) {
        const int slot = i % slots;
        const uint32_t fills = uint32_t(i / slots);
        const unsigned long long t0 = clock64();
        if (fills > 0) {
          if (handoff) mbar_wait(empty0 + 8 * slot, (fills - 1) & 1);
          else mbar_wait(full0 + 8 * slot, (fills - 1) & 1);
        }
        const unsigned long long t1 = clock64();
        mbar_arrive_expect_tx(full0 + 8 * slot, uint32_t(slot_bytes));
        for (int c = 0; c < copies; ++c)
          bulk_copy(base + uint32_t(slot * slot_bytes + c * copy_bytes), my + size_t(i) * slot_bytes + c * copy_bytes,
                    uint32_t(copy_bytes), full0 + 8 * slot);
        const unsigned long long t2 = clock64();
        wait_cycles += t1 - t0;
        issue_cycles += t2 - t1;
      }
      if (blockIdx.x == 0 && j == 0) { cycles[0] = wait_cycles; cycles[1] = issue_cycles; cycles[2] = (n + issuers - 1) / issuers; }
      if (!handoff)  // drain: the last fill of each of this issuer's slots
        for (int i = j + ((n > slots ? n - slots : 0) / issuers) * issuers; i < n; i += issuers)
          if (i + slots >= n) mbar_wait(full0 + 8 * (i % slots), uint32_t(i / slots) & 1);
    }
  } else if (handoff && t >= consumer0 && t < consumer0 + 32) {  // consumer warp
    unsigned long long acc = 0;
    for (int i = 0; i < n; ++i) {
      const int slot = i % slots;
      mbar_wait(full0 + 8 * slot, uint32_t(i / slots) & 1);
      acc += smem[slot * slot_bytes + (t % 32) * 4];
      mbar_arrive(empty0 + 8 * slot);
    }
    if (acc == 0x123456789ull) *sink = acc;
  }
}

// The GEMMs' producer shape: slot kt's weights (`copies` bulk copies, `slot_bytes` in all) issued by
// lane 0 of producer warp kt % W, `rows` token rows of 128 bytes per slot gathered with cp.async by
// the producer lanes from an L2-resident buffer (arrivals on `full`), one consumer warp releasing
// slot kt - 1 once slot kt is full (the GEMMs keep one wgmma batch in flight).  Tiles of
// `tile_slots` slots; `persistent` 0: one CTA per tile (the GEMMs' grid below 4096 expert rows:
// each CTA pays its start-up), 1: as many CTAs as fit, each streaming tile after tile.
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr), "l"(gmem));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t mbar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(mbar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive_on_cp_async(uint32_t mbar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(mbar) : "memory");
}

constexpr int kRowBytes = 128;  // one BK = 64 column of a bf16 token row
constexpr size_t kTokenBytes = size_t(1) << 20;  // the token rows' buffer: stays in L2

// mode 0 (walk, the GEMMs today): every producer warp walks every slot, waits for its `empty`, gathers
// its share of the slot's token rows and arrives; lane 0 of warp kt % W also issues slot kt's weights.
// mode 1 (own): warp w owns slots kt = w (mod W): it alone waits for them, issues their weights and
// gathers all their token rows.  mode 2 (split): warps 0..W/2-1 own the weights of alternate slots
// (arrive.expect_tx), warps W/2..W-1 walk every slot gathering token rows.
// early 1: the consumer releases slot kt as soon as it read it (0: once slot kt + 1 is full, as the
// GEMMs, whose wgmma on slot kt is still in flight then).
__global__ void gemm_like_kernel(const uint8_t* weights, const uint8_t* tokens, int tiles, int tile_slots,
                                 int persistent, int slot_bytes, int copies, int slots, int producer_warps,
                                 int rows, int mode, int early, unsigned long long* sink) {
  const int ring_bytes = slots * (slot_bytes + rows * kRowBytes);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full0 = base + uint32_t(ring_bytes), empty0 = full0 + 8u * uint32_t(slots);
  for (int i = int(threadIdx.x); i < ring_bytes / 16; i += int(blockDim.x))  // the GEMMs zero their B ring
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  const int weight_warps = mode == 2 ? producer_warps / 2 : producer_warps;
  const int full_count = mode == 0 ? 32 * producer_warps : mode == 1 ? 32 : 32 * (producer_warps - weight_warps) + 1;
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) { mbar_init(full0 + 8 * s, full_count); mbar_init(empty0 + 8 * s, 32); }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int t = int(threadIdx.x), lane = t % 32, warp = t / 32;
  const int stride = persistent ? int(gridDim.x) : tiles;  // striding over tiles, or one tile per CTA
  const int per_tile = tile_slots;
  if (warp < producer_warps) {
    // Which slots this warp visits, whether it issues their weights, and which token rows it gathers.
    const bool weight_warp = warp < weight_warps;
    const int visit_stride = mode == 0 ? 1 : mode == 1 ? producer_warps : weight_warp ? weight_warps : 1;
    const int visit_first = mode == 0 ? 0 : mode == 1 ? warp : weight_warp ? warp : 0;
    const int row_warps = mode == 0 ? producer_warps : mode == 1 ? 1 : producer_warps - weight_warps;
    const int row_warp = mode == 0 ? warp : mode == 1 ? 0 : warp - weight_warps;
    const bool gathers = mode != 2 || !weight_warp;
    int pass = 0;  // tiles this CTA streamed so far
    for (int tile = int(blockIdx.x); tile < tiles; tile += stride, ++pass) {
      const uint8_t* w = weights + size_t(tile) * per_tile * slot_bytes;
      for (int kt = visit_first; kt < per_tile; kt += visit_stride) {
        const int i = pass * per_tile + kt;  // this CTA's fill index
        const int slot = i % slots;
        if (i >= slots) mbar_wait(empty0 + 8 * slot, uint32_t(i / slots - 1) & 1);
        const bool issues = mode == 0 ? lane == 0 && warp == kt % producer_warps : lane == 0 && weight_warp;
        if (issues) {
          if (mode == 2) mbar_arrive_expect_tx(full0 + 8 * slot, uint32_t(slot_bytes));
          else mbar_expect_tx(full0 + 8 * slot, uint32_t(slot_bytes));
          for (int c = 0; c < copies; ++c)
            bulk_copy(base + uint32_t(slot * slot_bytes + c * (slot_bytes / copies)),
                      w + size_t(kt) * slot_bytes + c * (slot_bytes / copies), uint32_t(slot_bytes / copies),
                      full0 + 8 * slot);
        }
        if (gathers) {
          // lane (r, q): rows r + 8 (row_warp + row_warps j), 16-byte chunks q and q + 4 of each
          for (int r = lane / 4 + 8 * row_warp; r < rows; r += 8 * row_warps)
            for (int q = lane % 4; q < kRowBytes / 16; q += 4) {
              const size_t src = (size_t(tile % 64) * 28 * 8192 + size_t(r) * 8192 + size_t(kt) * kRowBytes + q * 16) %
                                 kTokenBytes;
              cp_async_16(base + uint32_t(slots * slot_bytes + (slot * rows + r) * kRowBytes + q * 16), tokens + src);
            }
          mbar_arrive_on_cp_async(full0 + 8 * slot);
        }
      }
      if (!persistent) break;
    }
  } else if (warp == producer_warps) {  // consumer warp
    unsigned long long acc = 0;
    int i = 0;
    for (int tile = int(blockIdx.x); tile < tiles; tile += stride) {
      for (int kt = 0; kt < per_tile; ++kt, ++i) {
        const int slot = i % slots;
        mbar_wait(full0 + 8 * slot, uint32_t(i / slots) & 1);
        acc += smem[slot * slot_bytes + lane * 4];
        if (early) mbar_arrive(empty0 + 8 * slot);
        else if (i > 0) mbar_arrive(empty0 + 8 * ((i - 1) % slots));
      }
      if (!persistent) break;
    }
    if (!early && i > 0) mbar_arrive(empty0 + 8 * ((i - 1) % slots));
    if (acc == 0x123456789ull) *sink = acc;
  }
}

int main(int argc, char** argv) {
  const bool gemm_only = argc > 1 && argv[1][0] == 'g';  // `stream_bench gemm`: the gemm-like sweep only
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t total = size_t(4) << 30;
  uint8_t* src;
  unsigned long long *sink, *cycles;
  CHECK(cudaMalloc(&src, total));
  CHECK(cudaMalloc(&sink, 8));
  CHECK(cudaMalloc(&cycles, 24));
  CHECK(cudaMemset(src, 1, total));
  CHECK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  // Median of 5 timed launches after 2 warm-ups, ms.
  auto median_ms = [&](auto launch) {
    std::vector<float> ms;
    for (int rep = 0; rep < 7; ++rep) {
      CHECK(cudaEventRecord(a));
      launch();
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaGetLastError());
      float t;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (rep > 1) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  printf("handoff issuers issuer_stride ctas_per_sm slot_bytes copies slots inflight_per_sm_KB TB/s wait_cycles/iter issue_cycles/iter (CTA 0, issuer 0)\n");
  struct Issue { int issuers, stride; };
  for (int handoff = 0; handoff < (gemm_only ? 0 : 2); ++handoff)
    for (Issue is : {Issue{1, 32}, Issue{2, 1}, Issue{4, 1}, Issue{2, 32}, Issue{4, 32}})
      for (int per_sm : {1, 2, 4})
        for (int slot_bytes : {2048, 4096, 8192, 16384})
          for (int copies : {1, 4})
            for (int slots : {4, 8, 12, 16, 24}) {
              const size_t smem_bytes = size_t(slots) * slot_bytes + 16 * slots;
              if (smem_bytes * per_sm > 220 * 1024 || slots % is.issuers) continue;
              if (slot_bytes / copies < 1024 && copies > 1) continue;
              const int ctas = sms * per_sm;
              const int threads = (is.issuers * is.stride + 31) / 32 * 32 + (handoff ? 32 : 0);
              size_t per_cta = total / ctas / slot_bytes * slot_bytes;
              const float med = median_ms([&] {
                stream_kernel<<<ctas, threads, smem_bytes>>>(src, per_cta, slot_bytes, copies, slots, handoff,
                                                             is.issuers, is.stride, sink, cycles);
              });
              unsigned long long cyc[3];
              CHECK(cudaMemcpy(cyc, cycles, sizeof(cyc), cudaMemcpyDeviceToHost));
              printf("%d %d %d %d %d %d %d %.0f %.2f %.0f %.0f\n", handoff, is.issuers, is.stride, per_sm, slot_bytes, copies,
                     slots, double(slots) * slot_bytes * per_sm / 1024.0, double(per_cta) * ctas / (med * 1e-3) / 1e12,
                     double(cyc[0]) / cyc[2], double(cyc[1]) / cyc[2]);
            }

  // The GEMMs' shape: 64-slot tiles (GEMM1's K = 4096 at BK = 64), 4 KB of weights per slot in four
  // copies (m128: two slices' atoms and scales), 6 slots, 0 or 28 token rows (T = 1024's average).
  uint8_t* tokens;
  CHECK(cudaMalloc(&tokens, kTokenBytes));
  CHECK(cudaMemset(tokens, 1, kTokenBytes));
  CHECK(cudaFuncSetAttribute(gemm_like_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  printf("\ngemm-like: mode(0 walk 1 own 2 split) early_release producer_warps ctas_per_sm rows grid slots weights_TB/s\n");
  const int slot_bytes = 4096, copies = 4, tile_slots = 64;
  const int tiles = int((size_t(2) << 30) / (size_t(tile_slots) * slot_bytes));  // 2 GiB of weights
  for (int mode = 0; mode < 3; ++mode)
    for (int early = 0; early < 2; ++early)
      for (int producer_warps : {2, 4})
        for (int per_sm : {1, 2})
          for (int rows : {0, 28, 64})
            for (int persistent = 0; persistent < 2; ++persistent)
              for (int slots : {6, 8}) {
                if (per_sm == 1 && (persistent || slots == 6)) continue;  // keep the sweep short
                const size_t ring = size_t(slots) * (slot_bytes + rows * kRowBytes) + 16 * slots;
                const size_t smem_bytes = std::max(ring, size_t(200 * 1024 / per_sm));  // caps CTAs per SM
                if (ring * per_sm > 220 * 1024) continue;
                const int grid = persistent ? sms * per_sm : tiles;
                const float med = median_ms([&] {
                  gemm_like_kernel<<<grid, 32 * (producer_warps + 1), smem_bytes>>>(
                      src, tokens, tiles, tile_slots, persistent, slot_bytes, copies, slots, producer_warps, rows, mode,
                      early, sink);
                });
                printf("%d %d %d %d %d %s %d %.2f\n", mode, early, producer_warps, per_sm, rows,
                       persistent ? "persistent" : "tiles", slots, double(tiles) * tile_slots * slot_bytes / (med * 1e-3) / 1e12);
              }
  return 0;
}
