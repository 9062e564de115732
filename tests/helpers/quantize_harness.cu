// The arch-neutral MXFP8 quantizer of the SM100 layer (moegen/quantize.cuh), built for the GPU at hand
// by tests/test_quantize_gpu.py and compared there with moegen.mxfp8 bit for bit.
#include <cuda_runtime.h>
#include "moegen/quantize.cuh"

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
