// MXFP8 quantization of activations (e4m3 values, one e8m0 scale per 32 along K), arch-neutral: the
// SM100 layer quantizes the gathered hidden states before GEMM1 and the SwiGLU output before GEMM2
// with it, and the H200 tests it bit for bit against moegen.mxfp8.
//
// Shared exponent: the smallest e with amax <= 448 * 2^e (no element saturates): amax = m * 2^e0,
// m in [1, 2): e = e0 - 8, plus one when m > 1.75; an all-zero block gets e = -127 (byte 0).
// Elements: x * 2^-e rounded to nearest even e4m3 (saturating, which the exponent makes moot).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "moegen/common.cuh"
#include "moegen/pdl.cuh"
#include "moegen/progress.cuh"

namespace moegen {

constexpr int kMxBlock = 32;

// The block's exponent from its largest magnitude (every lane passes the same amax).
__device__ __forceinline__ int mxfp8_exponent(float amax) {
  if (!(amax > 0.f)) return -127;
  int e0;
  const float m = 2.f * frexpf(amax, &e0);  // amax = m * 2^(e0 - 1), m in [1, 2)
  const int e = (e0 - 1) - 8 + (m > 1.75f ? 1 : 0);
  return e < -127 ? -127 : (e > 127 ? 127 : e);
}

__device__ __forceinline__ uint8_t to_e4m3(float x, int e) {
  return uint8_t(__nv_cvt_float_to_fp8(ldexpf(x, -e), __NV_SATFINITE, __NV_E4M3));
}

// Lane l of a full warp holds element l of one 32-element block: its e4m3 byte; *scale gets the
// block's e8m0 byte (in every lane).
__device__ __forceinline__ uint8_t quantize_mxfp8_lane(float x, uint8_t* scale) {
  float amax = fabsf(x);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const int e = mxfp8_exponent(amax);
  *scale = uint8_t(e + 127);
  return to_e4m3(x, e);
}

// Byte offset of the scale of row r, K-block kb in CUTLASS's SM100 block-scaled layout for an
// operand of K columns (moegen.layout.sf_offset).
__device__ __forceinline__ long sf_offset(int r, int kb, int k) {
  const int k_chunks = (k / kMxBlock + 3) / 4;
  return long(r / 128) * k_chunks * 512 + (kb / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + kb % 4;
}

}  // namespace moegen

namespace moegen {

// The segment of a nondecreasing prefix array [n + 1] that holds x (starts[i] <= x < starts[i + 1]; x
// inside [starts[0], starts[n])): an expert-order row's expert.  L2 loads, as the array is the
// previous kernel's output.
__device__ __forceinline__ int segment_of(const int32_t* starts, int n, int x) {
  int lo = 0, hi = n;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (__ldcg(starts + mid) <= x) lo = mid; else hi = mid;
  }
  return lo;
}

// Quantizes the rows of an expert-ordered activation matrix for a block-scaled grouped GEMM: values
// q [rows, k_pad] (e4m3 bytes), scales of expert e at sf + sf_rows[e] * (k_pad / 32) in the
// block-scaled layout over its rows padded to 128; the padding rows' scales get byte 0 (the GEMM
// reads whole 128-row chunks).  Source: value(row, expert, column) (0 past the real K).  One warp
// per (padded row, K-block); sf_rows[kGroups] padded rows in all.
template <class Source, int kGroups>
__global__ void __launch_bounds__(256) quantize_rows_kernel(Source src, const int32_t* __restrict__ offsets,
                                                           const int32_t* __restrict__ sf_rows, int k_pad,
                                                           uint8_t* __restrict__ q, uint8_t* __restrict__ sf) {
  const int lane = threadIdx.x % kWarpSize;
  const int kbs = k_pad / kMxBlock;
  const long items = long(sf_rows[kGroups]) * kbs;
  const long warps = long(gridDim.x) * (blockDim.x / kWarpSize);
  for (long item = long(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize; item < items;
       item += warps) {
    const int p = int(item / kbs), kb = int(item % kbs);
    const int e = segment_of(sf_rows, kGroups, p);  // the expert whose padded rows hold p
    const int j = p - sf_rows[e], count = offsets[e + 1] - offsets[e];
    uint8_t* scale = sf + long(sf_rows[e]) * kbs + sf_offset(j, kb, k_pad);
    if (j < count) {
      const int r = offsets[e] + j;
      uint8_t s;
      q[long(r) * k_pad + kb * kMxBlock + lane] = quantize_mxfp8_lane(src(r, e, kb * kMxBlock + lane), &s);
      if (lane == 0) *scale = s;
    } else if (lane == 0) {
      *scale = 0;
    }
  }
}

// sf_rows[e] = sum over experts before e of their rows rounded up to 128 (sf_rows[kGroups]: all),
// from the expert-order offsets.  One warp.
template <int kGroups>
__global__ void sf_rows_kernel(const int32_t* __restrict__ offsets, int32_t* __restrict__ sf_rows) {
  const int lane = threadIdx.x;
  int carry = 0;
  for (int base = 0; base < kGroups; base += kWarpSize) {
    const int e = base + lane;
    const int count = e < kGroups ? offsets[e + 1] - offsets[e] : 0;
    int incl = (count + 127) / 128 * 128;
#pragma unroll
    for (int off = 1; off < kWarpSize; off <<= 1) {
      const int x = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += x;
    }
    const int padded = (count + 127) / 128 * 128;
    if (e < kGroups) sf_rows[e] = carry + incl - padded;
    carry += __shfl_sync(0xffffffffu, incl, kWarpSize - 1);
  }
  if (lane == 0) sf_rows[kGroups] = carry;
}

// W4A8 activations (SM90): each row of a bf16 matrix -> e4m3 and one fp32 scale amax / 448 (an
// all-zero row: 1); elements x / scale rounded to nearest even, saturating: as
// moegen.fp8.quantize_per_token, bit for bit (IEEE divisions, not reciprocals).  How a row's work
// is split changes no bit: the amax is exact whatever the order.
__device__ __forceinline__ float amax_bf16x8(const uint4& v, float amax) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
  return amax;
}
__device__ __forceinline__ float e4m3_row_scale(float amax) { return amax > 0.f ? __fdiv_rn(amax, 448.f) : 1.f; }
__device__ __forceinline__ uint2 bf16x8_to_e4m3x8(const uint4& v, float s) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
  uint32_t out[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 a = __bfloat1622float2(h[2 * i]), b = __bfloat1622float2(h[2 * i + 1]);
    const uint32_t b0 = __nv_cvt_float_to_fp8(__fdiv_rn(a.x, s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t b1 = __nv_cvt_float_to_fp8(__fdiv_rn(a.y, s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t b2 = __nv_cvt_float_to_fp8(__fdiv_rn(b.x, s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t b3 = __nv_cvt_float_to_fp8(__fdiv_rn(b.y, s), __NV_SATFINITE, __NV_E4M3);
    out[i] = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
  }
  return make_uint2(out[0], out[1]);
}

// Rows [0, rows) of x [rows, K] by num_warps warps of a block, rows <= num_warps (each of them calls
// it with its index `warp` < num_warps): each row gets num_warps / rows warps, which meet through
// amax_smem [num_warps] and named barrier `barrier` (not 0: the block's other warps may be elsewhere).
// One warp per row took 6.5 us for a 4096-wide row on an H200 (a decode step's routing went from 4
// to 11 us).
template <int K>
__device__ __forceinline__ void quantize_rows_e4m3_warps(const __nv_bfloat16* __restrict__ x, int rows,
                                                         uint8_t* __restrict__ q, float* __restrict__ scale,
                                                         float* amax_smem, int warp, int num_warps, int barrier) {
  static_assert(K % 8 == 0, "rows are read in 16-byte chunks");
  constexpr int kChunks = K / 8;
  const int lane = int(threadIdx.x) % kWarpSize;
  const int per_row = rows > 0 ? num_warps / rows : num_warps;
  const int row = warp / per_row, part = warp % per_row;
  const bool active = rows > 0 && row < rows;
  const uint4* src = reinterpret_cast<const uint4*>(x + size_t(active ? row : 0) * K);
  float amax = 0.f;
  // Unrolled: up to four of a lane's loads in flight at once (the stride is a runtime value).
  if (active) {
#pragma unroll 4
    for (int c = part * kWarpSize + lane; c < kChunks; c += per_row * kWarpSize) amax = amax_bf16x8(src[c], amax);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  if (lane == 0) amax_smem[warp] = amax;
  asm volatile("bar.sync %0, %1;\n" ::"r"(barrier), "r"(num_warps * kWarpSize) : "memory");
  if (!active) return;
  for (int i = 0; i < per_row; ++i) amax = fmaxf(amax, amax_smem[row * per_row + i]);
  const float s = e4m3_row_scale(amax);
  if (part == 0 && lane == 0) scale[row] = s;
  uint2* dst = reinterpret_cast<uint2*>(q + size_t(row) * K);
#pragma unroll 4
  for (int c = part * kWarpSize + lane; c < kChunks; c += per_row * kWarpSize) dst[c] = bf16x8_to_e4m3x8(src[c], s);
}

// Threads per row of the row quantizers below.
constexpr int quantize_row_threads(int k) {
  const int chunks = k / 8;
  const int by_registers = (chunks + 3) / 4;  // at most 4 chunks (16 registers) per thread
  const int threads = by_registers > 128 ? by_registers : (chunks < 128 ? chunks : 128);
  return (threads + kWarpSize - 1) / kWarpSize * kWarpSize;
}
template <int K>
constexpr int kQuantizeRowThreads = quantize_row_threads(K);

// One row of x [., K] by a block of kQuantizeRowThreads<K>: each thread holds at most
// kChunksPerThread 16-byte chunks in registers (the row is read once, from L2: its producer may still
// be running, see quantize_rows_e4m3_following_kernel), and the block's warps meet through shared
// memory.  Every thread of the block calls it.
template <int K>
__device__ __forceinline__ void quantize_row_e4m3_block(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
                                                        float* __restrict__ scale) {
  static_assert(K % 8 == 0, "rows are read in 16-byte chunks");
  constexpr int kThreads = kQuantizeRowThreads<K>, kChunks = K / 8;
  constexpr int kChunksPerThread = (kChunks + kThreads - 1) / kThreads;
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ float amax_smem[kWarps];
  const uint4* src = reinterpret_cast<const uint4*>(x);
  uint4 v[kChunksPerThread];
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int c = int(threadIdx.x) + i * kThreads;
    v[i] = c < kChunks ? __ldcg(src + c) : make_uint4(0, 0, 0, 0);
    amax = amax_bf16x8(v[i], amax);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  if (threadIdx.x % kWarpSize == 0) amax_smem[threadIdx.x / kWarpSize] = amax;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) amax = fmaxf(amax, amax_smem[w]);
  const float s = e4m3_row_scale(amax);
  if (threadIdx.x == 0) *scale = s;
  uint2* dst = reinterpret_cast<uint2*>(q);
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int c = int(threadIdx.x) + i * kThreads;
    if (c < kChunks) dst[c] = bf16x8_to_e4m3x8(v[i], s);
  }
}

// One block per row of x [rows, K], after x's producer grid ends.  `live_rows` (a device count, or
// nullptr for all) skips rows nothing reads: expert-order rows past the local experts'.
template <int K>
__global__ void __launch_bounds__(kQuantizeRowThreads<K>) quantize_rows_e4m3_kernel(
    const __nv_bfloat16* __restrict__ x, long rows, const int32_t* __restrict__ live_rows, uint8_t* __restrict__ q,
    float* __restrict__ scale) {
  // The next GEMM may launch now and stream its weights; its pdl_wait covers this grid's
  // completion, which follows x's producer's.
  pdl_launch_dependents();
  pdl_wait();  // x is the previous kernel's output
  const long row = blockIdx.x;
  if (row >= (live_rows ? long(__ldcg(live_rows)) : rows)) return;  // uniform per block
  quantize_row_e4m3_block<K>(x + row * K, q + row * K, scale + row);
}

// The same per expert, for rows in expert order (W4A8's `h`): row r's block waits until
// x_progress[e] (e: r's expert, from offsets [kExperts + 1]) reaches the expert's rows x
// x_progress_per_row, quantizes the row, and adds 1 to quantized_rows[e], which the next kernel waits
// for.  Rows past offsets[kExperts] (other ranks' experts) are skipped.  The offsets predate x's
// producer: each of its CTAs passed its own pdl_wait before this grid launched.
//
// This grid calls no pdl_wait (it waits on counters) and GEMM2 waits only for the live rows' counts, so
// no later wait covers a skipped row's block.  Hence the offsets are read before the trigger: GEMM2
// launches only once every block has triggered, so no block can read the next call's offsets
// (rewritten after this call's finalize), whatever PDL guarantees about grids that never wait.
template <int K, int kExperts>
__global__ void __launch_bounds__(kQuantizeRowThreads<K>) quantize_rows_e4m3_following_kernel(
    const __nv_bfloat16* __restrict__ x, const int32_t* __restrict__ offsets,
    const unsigned long long* __restrict__ x_progress, unsigned long long x_progress_per_row,
    unsigned long long* __restrict__ quantized_rows, uint8_t* __restrict__ q, float* __restrict__ scale) {
  __shared__ int expert_s;
  __shared__ unsigned long long target_s;
  const int row = int(blockIdx.x);
  if (threadIdx.x == 0) {
    int e = -1;
    unsigned long long target = 0;
    if (row < __ldcg(offsets + kExperts)) {
      e = segment_of(offsets, kExperts, row);
      target = (unsigned long long)(__ldcg(offsets + e + 1) - __ldcg(offsets + e)) * x_progress_per_row;
    }
    expert_s = e;
    target_s = target;
  }
  __syncthreads();  // the offsets' values are in shared memory before any thread triggers
  pdl_launch_dependents();
  const int e = expert_s;
  if (e < 0) return;  // uniform per block
  if (threadIdx.x == 0) progress_wait_until(x_progress + e, target_s);
  __syncthreads();
  quantize_row_e4m3_block<K>(x + long(row) * K, q + long(row) * K, scale + row);
  __syncthreads();  // every thread's stores, before the release
  if (threadIdx.x == 0) progress_release_add(quantized_rows + e, 1);
}

// Rows gathered from token-order hidden states (GEMM1's activations).
struct GatherRows {
  const __nv_bfloat16* hidden;  // [T, k]
  const int32_t* row_token;     // expert-order row -> token
  int k;
  __device__ float operator()(int r, int /*expert*/, int c) const {
    return c < k ? __bfloat162float(hidden[long(row_token[r]) * k + c]) : 0.f;
  }
};

}  // namespace moegen
