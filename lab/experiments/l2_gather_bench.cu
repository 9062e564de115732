// How fast can the SMs read from L2, the way the GEMMs gather token rows (16-byte cp.async per lane
// into a shared-memory ring, 128-byte row segments of rows picked at random), as a function of the
// working set (L2-resident or not) and of the copies in flight per SM?  The ceiling for the large-T
// GEMMs, whose streaming is mostly token rows read again by every weight-row tile
// (docs/benchmarks.md, "What bounds W4A8 from T = 1024").
// Standalone:  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a lab/experiments/l2_gather_bench.cu -o /tmp/l2g && /tmp/l2g
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

constexpr int kRowBytes = 4096;   // one e4m3 hidden row of DeepSeek-V4-Flash (K = 4096)
constexpr int kThreads = 256;
constexpr int kSlotBytes = 16384; // one K tile of 128 token rows x 128 bytes, as GEMM1's B slot

__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
}

// Each CTA fills `slots` ring slots of 16 KB in turn: 128 rows (random, from `rows`) x one 128-byte
// K column (the step's), 8 lanes per row; it keeps slots - 1 fills in flight.
template <int Slots>
__global__ void __launch_bounds__(kThreads) gather(const uint8_t* buf, const int* row_ids, int rows_in_set,
                                                   int steps, unsigned long long* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x;
  int seq = blockIdx.x * 977;
  for (int s = 0; s < steps; ++s) {
    const int slot = s % Slots;
    const int kcol = s % (kRowBytes / 128);
    // 128 rows x 8 chunks = 1024 chunks over 256 threads: 4 each
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int chunk = tid + i * kThreads, row = chunk / 8, part = chunk % 8;
      const int r = row_ids[(seq + row) % rows_in_set];
      cp_async_16(base + slot * kSlotBytes + chunk * 16, buf + size_t(r) * kRowBytes + kcol * 128 + part * 16);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Slots - 1) : "memory");
    seq += 128;
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();
  if (tid == 0) atomicAdd(sink, smem[(steps * 7) % (Slots * kSlotBytes)]);
}

template <int Slots>
void run(const uint8_t* buf, const int* ids, int rows_in_set, int ctas_per_sm, int sms) {
  const int smem = Slots * kSlotBytes;
  CHECK(cudaFuncSetAttribute(gather<Slots>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  unsigned long long* sink;
  CHECK(cudaMalloc(&sink, 8));
  const int grid = sms * ctas_per_sm, steps = 4096;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    CHECK(cudaEventRecord(a));
    gather<Slots><<<grid, kThreads, smem>>>(buf, ids, rows_in_set, steps, sink);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (rep > 0 && ms < best) best = ms;
  }
  const double bytes = double(grid) * steps * kSlotBytes;
  printf("working set %7.1f MB  slots %d  CTAs/SM %d  in flight/SM %4d KB  %6.2f TB/s\n",
         rows_in_set * double(kRowBytes) / 1e6, Slots, ctas_per_sm, (Slots - 1) * kSlotBytes * ctas_per_sm / 1024,
         bytes / (best * 1e-3) / 1e12);
  CHECK(cudaFree(sink));
}

int main() {
  int sms;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int max_rows = 1 << 18;  // 1 GiB of rows
  uint8_t* buf;
  CHECK(cudaMalloc(&buf, size_t(max_rows) * kRowBytes));
  CHECK(cudaMemset(buf, 1, size_t(max_rows) * kRowBytes));
  int* ids;
  CHECK(cudaMalloc(&ids, max_rows * sizeof(int)));
  for (int rows : {2048, 6144, 10240, 1 << 18}) {  // 8, 25, 42 MB (L2 is 50 MB), 1 GiB
    int* h = (int*)malloc(rows * sizeof(int));
    srand(1);
    for (int i = 0; i < rows; ++i) h[i] = rand() % rows;
    CHECK(cudaMemcpy(ids, h, rows * sizeof(int), cudaMemcpyHostToDevice));
    free(h);
    run<4>(buf, ids, rows, 1, sms);
    run<4>(buf, ids, rows, 2, sms);
    run<8>(buf, ids, rows, 1, sms);
  }
  return 0;
}
