// The arch-neutral quantizers (moegen/quantize.cuh): the SM100 layer's MXFP8 one and W4A8's per-row
// e4m3 ones, built for the GPU at hand by tests/test_quantize_gpu.py and compared there with
// moegen.mxfp8 and moegen.fp8 bit for bit.
#include <cuda_runtime.h>
#include "moegen/quantize.cuh"
#include "moegen/routing.cuh"  // the many-block routing's quantizer blocks: kRouteWarps, kQuantizeRowsPerBlock

namespace {
constexpr int kGroups = 8;
struct DirectRows {
  const __nv_bfloat16* x;  // [rows, k]
  int k;
  __device__ float operator()(int r, int /*expert*/, int c) const {
    return c < k ? __bfloat162float(x[long(r) * k + c]) : 0.f;
  }
};
}  // namespace

extern "C" int moegen_test_quantize(const void* x, int rows, int k, int k_pad, const int32_t* offsets, int32_t* sf_rows,
                                    uint8_t* q, uint8_t* sf) {
  moegen::sf_rows_kernel<kGroups><<<1, moegen::kWarpSize>>>(offsets, sf_rows);
  const long items = (long(rows) + 128L * kGroups) * (k_pad / 32);
  moegen::quantize_rows_kernel<DirectRows, kGroups><<<unsigned((items + 7) / 8), 256>>>(
      DirectRows{static_cast<const __nv_bfloat16*>(x), k}, offsets, sf_rows, k_pad, q, sf);
  return int(cudaDeviceSynchronize());
}

// The scale rows' prefix sum alone, at expert counts past one warp's 32 (a partial last pass, and 256).
extern "C" int moegen_test_sf_rows(int groups, const int32_t* offsets, int32_t* sf_rows) {
  switch (groups) {
    case 48: moegen::sf_rows_kernel<48><<<1, moegen::kWarpSize>>>(offsets, sf_rows); break;
    case 256: moegen::sf_rows_kernel<256><<<1, moegen::kWarpSize>>>(offsets, sf_rows); break;
    default: return -1;
  }
  return int(cudaDeviceSynchronize());
}

// W4A8's per-row e4m3 quantizers (moegen/quantize.cuh), each way a row's work is split.
namespace {
template <int K>
__global__ void rows_by_warps(const __nv_bfloat16* x, int rows, uint8_t* q, float* scale, int first_warp) {
  __shared__ float amax[32];
  const int warp = int(threadIdx.x) / moegen::kWarpSize, warps = int(blockDim.x) / moegen::kWarpSize;
  if (warp < first_warp) return;  // as the routing warps that hold a token
  moegen::quantize_rows_e4m3_warps<K>(x, rows, q, scale, amax, warp - first_warp, warps - first_warp, 1);
}
// As route_kernel's quantizer blocks: kQuantizeRowsPerBlock rows per block of kRouteWarps warps.
template <int K>
__global__ void rows_by_blocks(const __nv_bfloat16* x, int rows, uint8_t* q, float* scale) {
  __shared__ float amax[moegen::kRouteWarps];
  const int row0 = int(blockIdx.x) * moegen::kQuantizeRowsPerBlock;
  moegen::quantize_rows_e4m3_warps<K>(x + long(row0) * K, min(moegen::kQuantizeRowsPerBlock, rows - row0),
                                      q + long(row0) * K, scale + row0, amax, int(threadIdx.x) / moegen::kWarpSize,
                                      moegen::kRouteWarps, 1);
}
template <int K>
int quantize_e4m3(const __nv_bfloat16* x, int rows, const int32_t* live_rows, int mode, int first_warp, uint8_t* q,
                  float* scale) {
  constexpr int kRowThreads = moegen::kQuantizeRowThreads<K>;
  if (mode == 0)
    moegen::quantize_rows_e4m3_kernel<K><<<rows, kRowThreads>>>(x, rows, live_rows, q, scale);
  else if (mode == 1)
    rows_by_warps<K><<<1, 32 * moegen::kWarpSize>>>(x, rows, q, scale, first_warp);
  else
    rows_by_blocks<K><<<(rows + moegen::kQuantizeRowsPerBlock - 1) / moegen::kQuantizeRowsPerBlock,
                        moegen::kRouteWarps * moegen::kWarpSize>>>(x, rows, q, scale);
  return int(cudaDeviceSynchronize());
}
}  // namespace

// mode 0: a block per row (live_rows may be nullptr); 1: one block, warps [first_warp, 32) sharing
// rows <= 32 - first_warp; 2: blocks of kRouteWarps warps, kQuantizeRowsPerBlock rows each.
extern "C" int moegen_test_quantize_e4m3(const void* x, int rows, int k, const int32_t* live_rows, int mode,
                                         int first_warp, uint8_t* q, float* scale) {
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  switch (k) {
    // every shipped model's hidden and intermediate sizes (and their --tp 2 halves)
    case 768: return quantize_e4m3<768>(xb, rows, live_rows, mode, first_warp, q, scale);
    case 1440: return quantize_e4m3<1440>(xb, rows, live_rows, mode, first_warp, q, scale);
    case 2048: return quantize_e4m3<2048>(xb, rows, live_rows, mode, first_warp, q, scale);
    case 2880: return quantize_e4m3<2880>(xb, rows, live_rows, mode, first_warp, q, scale);
    case 4096: return quantize_e4m3<4096>(xb, rows, live_rows, mode, first_warp, q, scale);
    case 7168: return quantize_e4m3<7168>(xb, rows, live_rows, mode, first_warp, q, scale);
    default: return -1;
  }
}
