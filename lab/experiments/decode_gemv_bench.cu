// Two questions before a decode kernel that streams the sm90_e2m1_atom64 layout without a shared-memory
// ring (one warp per 16 weight rows, the whole K, 16-byte loads straight into the A fragments,
// mma.sync m16n8k16):
//   bitwise  does mma.sync m16n8k16 (bf16 in, fp32 accumulate) give the same bits as wgmma m64n8k16
//            (A from registers), k16 step after k16 step over a long K?  If so, such a kernel keeps
//            the layer's batch invariance (tokens alone and in large batches run different kernels).
//   stream   how fast does that kernel read DeepSeek-V4-Flash's decode weights (T = 1: 6 experts x
//            4096 x 4096 for GEMM1, 6 x 4096 x 2048 for GEMM2) on this GPU: loads only, loads +
//            widening, loads + widening + mma.sync, for U atoms loaded ahead per warp?
// Standalone (no CUTLASS):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a lab/experiments/decode_gemv_bench.cu -o /tmp/dg
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <algorithm>
#include <random>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

// ---------------------------------------------------------------------------------------------- bitwise
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t ld_b32(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// A fragments: [block][K/16][128 threads][4 words]; B: [block][8][K]; D: [block][128][4].
__global__ void chain_mma(const uint32_t* afrag, const __nv_bfloat16* b, int K, float* d) {
  const int tid = threadIdx.x, lane = tid % 32, g = lane / 4, c = lane % 4;
  afrag += size_t(blockIdx.x) * (K / 16) * 512;
  b += size_t(blockIdx.x) * 8 * K;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int kb = 0; kb < K / 16; ++kb) {
    const uint4 w = *reinterpret_cast<const uint4*>(afrag + (size_t(kb) * 128 + tid) * 4);
    const uint32_t a[4] = {w.x, w.y, w.z, w.w};
    mma_m16n8k16(acc, a, ld_b32(b + g * K + kb * 16 + 2 * c), ld_b32(b + g * K + kb * 16 + 2 * c + 8));
  }
  for (int i = 0; i < 4; ++i) d[(size_t(blockIdx.x) * 128 + tid) * 4 + i] = acc[i];
}

__global__ void chain_wgmma(const uint32_t* afrag, const __nv_bfloat16* b, int K, float* d) {
  // One k16 block of B, K-major without swizzle: two 8x8 core matrices (k 0-7, k 8-15), 128 B each.
  __shared__ __align__(128) __nv_bfloat16 sb[128];
  const int tid = threadIdx.x;
  afrag += size_t(blockIdx.x) * (K / 16) * 512;
  b += size_t(blockIdx.x) * 8 * K;
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  const uint32_t base = uint32_t(__cvta_generic_to_shared(sb));
  // start >> 4 | LBO (K direction, 128 B) >> 4 << 16 | SBO (N direction, 256 B) >> 4 << 32, no swizzle
  const uint64_t desc = uint64_t((base >> 4) & 0x3FFF) | (uint64_t(128 >> 4) << 16) | (uint64_t(256 >> 4) << 32);
  for (int kb = 0; kb < K / 16; ++kb) {
    const int n = tid / 16, k = tid % 16;
    sb[(k / 8) * 64 + n * 8 + k % 8] = b[n * K + kb * 16 + k];
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const uint4 w = *reinterpret_cast<const uint4*>(afrag + (size_t(kb) * 128 + tid) * 4);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w), "l"(desc), "r"(1));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    __syncthreads();
  }
  float* out = d + (size_t(blockIdx.x) * 128 + tid) * 4;
  out[0] = d0; out[1] = d1; out[2] = d2; out[3] = d3;
}

static uint16_t to_bf16_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16); }
static float from_bf16_bits(uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; memcpy(&f, &u, 4); return f; }

static int bitwise(int blocks, int K, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const float e2m1[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  std::vector<uint16_t> A(size_t(blocks) * 64 * K), B(size_t(blocks) * 8 * K);
  // Weights as the kernels see them: e2m1 values times a power of two per 32 along K.
  for (size_t r = 0; r < size_t(blocks) * 64; ++r)
    for (int k0 = 0; k0 < K; k0 += 32) {
      const float s = ldexpf(1.f, int(rng() % 9) - 4);
      for (int k = k0; k < k0 + 32; ++k) A[r * K + k] = to_bf16_bits((rng() & 1 ? -1.f : 1.f) * e2m1[rng() % 8] * s);
    }
  for (auto& v : B) v = to_bf16_bits(normal(rng));
  // A fragments: thread t (warp w, g = lane/4, c = lane%4), k16 block kb, word j: rows 16w+g (+8 for
  // j odd), k = 16kb + 2c (+8 for j >= 2), low half the lower k.
  std::vector<uint32_t> F(size_t(blocks) * (K / 16) * 512);
  for (int blk = 0; blk < blocks; ++blk)
    for (int kb = 0; kb < K / 16; ++kb)
      for (int t = 0; t < 128; ++t)
        for (int j = 0; j < 4; ++j) {
          const int row = 16 * (t / 32) + (t % 32) / 4 + (j & 1) * 8, k = 16 * kb + 2 * (t % 4) + (j >> 1) * 8;
          const uint16_t* a = &A[(size_t(blk) * 64 + row) * K + k];
          F[((size_t(blk) * (K / 16) + kb) * 128 + t) * 4 + j] = uint32_t(a[0]) | (uint32_t(a[1]) << 16);
        }
  uint32_t* dF; __nv_bfloat16* dB; float *dM, *dW;
  CHECK(cudaMalloc(&dF, F.size() * 4)); CHECK(cudaMalloc(&dB, B.size() * 2));
  CHECK(cudaMalloc(&dM, size_t(blocks) * 512 * 4)); CHECK(cudaMalloc(&dW, size_t(blocks) * 512 * 4));
  CHECK(cudaMemcpy(dF, F.data(), F.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dM, 0xFF, size_t(blocks) * 512 * 4)); CHECK(cudaMemset(dW, 0xFF, size_t(blocks) * 512 * 4));
  chain_mma<<<blocks, 128>>>(dF, dB, K, dM);
  chain_wgmma<<<blocks, 128>>>(dF, dB, K, dW);
  CHECK(cudaDeviceSynchronize());
  std::vector<float> M(size_t(blocks) * 512), W(size_t(blocks) * 512);
  CHECK(cudaMemcpy(M.data(), dM, M.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(W.data(), dW, W.size() * 4, cudaMemcpyDeviceToHost));
  size_t differ = 0;
  double err_m = 0, err_w = 0, norm = 0;
  for (int blk = 0; blk < blocks; ++blk)
    for (int t = 0; t < 128; ++t)
      for (int i = 0; i < 4; ++i) {
        const size_t at = (size_t(blk) * 128 + t) * 4 + i;
        if (memcmp(&M[at], &W[at], 4) != 0) ++differ;
        const int row = 16 * (t / 32) + (t % 32) / 4 + (i >> 1) * 8, col = 2 * (t % 4) + (i & 1);
        double ref = 0;
        for (int k = 0; k < K; ++k)
          ref += double(from_bf16_bits(A[(size_t(blk) * 64 + row) * K + k])) * double(from_bf16_bits(B[(size_t(blk) * 8 + col) * K + k]));
        err_m += (M[at] - ref) * (M[at] - ref); err_w += (W[at] - ref) * (W[at] - ref); norm += ref * ref;
      }
  printf("bitwise K=%d, %d x 64x8 outputs, seed %u: mma.sync vs wgmma differ in %zu of %zu; relative L2 vs float64: "
         "mma.sync %.2e, wgmma %.2e\n", K, blocks, seed, differ, M.size(), sqrt(err_m / norm), sqrt(err_w / norm));
  CHECK(cudaFree(dF)); CHECK(cudaFree(dB)); CHECK(cudaFree(dM)); CHECK(cudaFree(dW));
  return differ == 0;
}

// ---------------------------------------------------------------------------------------------- stream
// Prepared weights: [E][row blocks][K atoms][2048] and scales [E][row blocks][K atoms][128]; warp w of
// a CTA owns rows 16w..16w+15 of its row block: bytes [512w, 512w + 512) of each atom, scale bytes
// [32w, 32w + 32).  Modes: 0 loads only, 1 + widening, 2 + widening + mma.sync.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t rotl(uint32_t x, int n) { return __funnelshift_l(x, x, n); }
template <bool kHigh>
__device__ __forceinline__ uint32_t mul_half(uint32_t a, uint32_t m) {
  const __nv_bfloat162 mm = *reinterpret_cast<__nv_bfloat162*>(&m);
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), kHigh ? __high2bfloat162(mm) : __low2bfloat162(mm));
  return *reinterpret_cast<uint32_t*>(&r);
}
template <bool kGroup1>
__device__ __forceinline__ void widen(uint32_t q, uint32_t pg, uint32_t pg8, uint32_t (&out)[4]) {
  constexpr uint32_t kValue = 0x81C081C0u, kE1 = 0x01000100u;
  out[0] = mul_half<kGroup1>(q & kValue, pg);
  out[1] = mul_half<kGroup1>(rotl(q, 4) & kValue, pg8);
  out[2] = mul_half<kGroup1>(rotl(q, 10) & kValue, pg);
  out[3] = mul_half<kGroup1>((rotl(q, 6) & (kValue & ~kE1)) | (rotl(q, 14) & kE1), pg8);
}

// Modes: 0 loads only; 1 + widening; 2 + widening + mma.sync (k16 steps in K order, one accumulator:
// invariant); 3 + widening + wgmma m64n8k16 (the CTA's four warps are one warpgroup; token rows staged
// once in shared memory; invariant); 4 + widening + fp32 FMA on the CUDA cores, one token (not
// invariant); 5 widening + mma.sync on register data, no loads (the SM's work alone); 6 as 2 with two
// accumulators, even and odd atoms (not invariant: is the accumulator chain's latency the bound?); 7 as 2
// with the token rows staged once per CTA in shared memory (row stride K + 8: conflict-free fragments).
__device__ __forceinline__ float bf_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
__device__ __forceinline__ void wgmma_n8(float (&d)[4], const uint32_t* a, uint64_t desc) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

extern __shared__ __align__(128) uint8_t dyn_smem[];

template <int U, int MODE>
__global__ void __launch_bounds__(128) decode_gemm(const uint8_t* __restrict__ w, const uint8_t* __restrict__ s,
                                                   const int* __restrict__ experts, int row_blocks, int k_atoms,
                                                   const __nv_bfloat16* __restrict__ x, int ntok, float* out,
                                                   int splits = 1) {
  // splits > 1: CTA (tile, split) takes K atoms [split, split + 1) * k_atoms / splits (split K: not invariant)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int split = blockIdx.x % splits, tile = blockIdx.x / splits;
  const int slot = tile / row_blocks, rb = tile % row_blocks;
  const int x_stride = k_atoms * 64;  // token row length
  k_atoms /= splits;
  const size_t atom0 = (size_t(experts[slot]) * row_blocks + rb) * k_atoms * splits + size_t(split) * k_atoms;
  x += size_t(split) * k_atoms * 64;
  const uint8_t* wp = w + atom0 * 2048 + warp * 512 + lane * 16;
  const uint8_t* sp = s + atom0 * 128 + warp * 32 + g * 4;
  const int K = k_atoms * 64;  // this CTA's share
  const bool has_tok = g < ntok;
  const __nv_bfloat16* xr = x + size_t(has_tok ? g : 0) * x_stride;  // token row of this lane's B column
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, acc_odd[4] = {0.f, 0.f, 0.f, 0.f};
  uint32_t sink = 0;
  uint32_t base = 0;
  const int kStride = K + 8;  // mode 7: bf16 elements per staged token row
  if constexpr (MODE == 7) {
    for (int i = threadIdx.x; i < 8 * (K / 8); i += 128) {
      const int n = i / (K / 8), k = (i % (K / 8)) * 8;
      const uint4 v = n < ntok ? *reinterpret_cast<const uint4*>(x + size_t(n) * x_stride + k) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dyn_smem + (size_t(n) * kStride + k) * 2) = v;
    }
    __syncthreads();
  }
  if constexpr (MODE == 3) {
    // B, K-major without swizzle: k16 block kb at kb * 256 bytes, core matrix (k 0-7 | 8-15) at + 0 | 128,
    // token row n at + 16 n.  Rows past ntok are zero.
    base = uint32_t(__cvta_generic_to_shared(dyn_smem));
    for (int i = threadIdx.x; i < 8 * K / 8; i += 128) {
      const int n = i / (K / 8), k = (i % (K / 8)) * 8;
      const uint4 v = n < ntok ? *reinterpret_cast<const uint4*>(x + size_t(n) * x_stride + k) : make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(dyn_smem + (k / 16) * 256 + ((k / 8) % 2) * 128 + n * 16) = v;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
  }
  uint32_t afrag[2][16];
  const uint64_t desc_hi = (uint64_t(128 >> 4) << 16) | (uint64_t(256 >> 4) << 32);
  auto compute_atom = [&](const uint4& q4, uint32_t sw, int atom) {
    const uint32_t pg = (sw << 7) & 0x7F807F80u, pg8 = (sw >> 1) & 0x7F807F80u;
    const uint32_t q[4] = {q4.x, q4.y, q4.z, q4.w};
    if constexpr (MODE == 3) {
      uint32_t* a = afrag[atom & 1];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t o[4];
        if (kk < 2) widen<false>(q[kk], pg, pg8, o); else widen<true>(q[kk], pg, pg8, o);
#pragma unroll
        for (int j = 0; j < 4; ++j) a[kk * 4 + j] = o[j];
      }
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_n8(acc, a + kk * 4, desc_hi | uint64_t(((base + uint32_t(atom * 4 + kk) * 256) >> 4) & 0x3FFF));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      fence_regs(afrag[(atom + 1) & 1]);
      return;
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      if (kk < 2) widen<false>(q[kk], pg, pg8, a); else widen<true>(q[kk], pg, pg8, a);
      const int k = atom * 64 + kk * 16 + 2 * c;
      if constexpr (MODE == 1) {
        sink ^= a[0] ^ a[1] ^ a[2] ^ a[3];
      } else if constexpr (MODE == 4) {
        const uint32_t x0 = ld_b32(x + k), x8 = ld_b32(x + k + 8);
        acc[0] = fmaf(bf_lo(a[0]), bf_lo(x0), acc[0]); acc[0] = fmaf(bf_hi(a[0]), bf_hi(x0), acc[0]);
        acc[0] = fmaf(bf_lo(a[2]), bf_lo(x8), acc[0]); acc[0] = fmaf(bf_hi(a[2]), bf_hi(x8), acc[0]);
        acc[2] = fmaf(bf_lo(a[1]), bf_lo(x0), acc[2]); acc[2] = fmaf(bf_hi(a[1]), bf_hi(x0), acc[2]);
        acc[2] = fmaf(bf_lo(a[3]), bf_lo(x8), acc[2]); acc[2] = fmaf(bf_hi(a[3]), bf_hi(x8), acc[2]);
      } else {
        uint32_t b0, b1;
        if constexpr (MODE == 7) {
          const __nv_bfloat16* sb = reinterpret_cast<const __nv_bfloat16*>(dyn_smem) + g * kStride + k;
          b0 = ld_b32(sb); b1 = ld_b32(sb + 8);
        } else {
          b0 = has_tok ? ld_b32(xr + k) : 0u; b1 = has_tok ? ld_b32(xr + k + 8) : 0u;
        }
        if (MODE == 6 && (atom & 1)) mma_m16n8k16(acc_odd, a, b0, b1);
        else mma_m16n8k16(acc, a, b0, b1);
      }
    }
  };
  if constexpr (MODE == 5) {
    uint4 q = make_uint4(lane * 0x01010101u, warp, blockIdx.x, 0x5A5A5A5Au);
    for (int a0 = 0; a0 < k_atoms; ++a0) {
      compute_atom(q, 0x7E7E7E7Eu, a0);
      q.x += 0x11111111u; q.y ^= q.x;
    }
  } else {
    uint4 cur[U], nxt[U];
    uint32_t cs[U], ns[U];
#pragma unroll
    for (int u = 0; u < U; ++u) { cur[u] = ld_stream(wp + size_t(u) * 2048); cs[u] = ld_stream32(sp + size_t(u) * 128); }
    for (int a0 = 0; a0 < k_atoms; a0 += U) {
      const bool more = a0 + U < k_atoms;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (more) { nxt[u] = ld_stream(wp + size_t(a0 + U + u) * 2048); ns[u] = ld_stream32(sp + size_t(a0 + U + u) * 128); }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if constexpr (MODE == 0) sink ^= cur[u].x ^ cur[u].y ^ cur[u].z ^ cur[u].w ^ cs[u];
        else compute_atom(cur[u], cs[u], a0 + u);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) { cur[u] = nxt[u]; cs[u] = ns[u]; }
    }
  }
  if constexpr (MODE == 3) {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_regs(afrag[0]); fence_regs(afrag[1]);
  }
  if constexpr (MODE == 4) {  // the four lanes of a row pair hold its partial sums
    for (int o = 1; o < 4; o <<= 1) { acc[0] += __shfl_xor_sync(~0u, acc[0], o); acc[2] += __shfl_xor_sync(~0u, acc[2], o); }
  }
  if constexpr (MODE == 6)
    for (int i = 0; i < 4; ++i) acc[i] += acc_odd[i];
  float* o = out + (size_t(blockIdx.x) * 128 + threadIdx.x) * 4;
  o[0] = acc[0] + float(sink & 1); o[1] = acc[1]; o[2] = acc[2]; o[3] = acc[3];
}

// The floor's kernel: every byte of a contiguous range read once with 16-byte loads.
__global__ void read_all(const uint4* p, size_t n, uint32_t* sink) {
  uint32_t v = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 q = ld_stream(p + i);
    v ^= q.x ^ q.y ^ q.z ^ q.w;
  }
  if (v == 0x12345678u) *sink = v;
}

struct Problem { const char* name; int row_blocks, k_atoms; };

int main(int argc, char** argv) {
  // `decode_gemv_bench profile`: each stream variant once (GEMM1, one token), for ncu; else SEED.
  const bool profile = argc > 1 && strcmp(argv[1], "profile") == 0;
  const unsigned seed = argc > 1 && !profile ? unsigned(atoi(argv[1])) : 12345u;
  int ok = profile ? 1 : bitwise(64, 4096, seed);
  if (!profile) ok &= bitwise(256, 256, seed + 1);
  printf("bitwise: %s\n", ok ? "IDENTICAL" : "DIFFERENT");

  const int E = 256, active = 6, sets = 40;
  const Problem problems[2] = {{"gemm1 (4096 rows x K 4096)", 64, 64}, {"gemm2 (4096 rows x K 2048)", 64, 32}};
  const size_t w_bytes = size_t(E) * 64 * 64 * 2048, s_bytes = size_t(E) * 64 * 64 * 128;
  uint8_t *w, *s; __nv_bfloat16* x; float* out; int* experts; uint32_t* sink;
  CHECK(cudaMalloc(&w, w_bytes)); CHECK(cudaMalloc(&s, s_bytes));
  CHECK(cudaMemset(w, 0x5A, w_bytes)); CHECK(cudaMemset(s, 0x7E, s_bytes));
  CHECK(cudaMalloc(&x, 8 * 4096 * 2)); CHECK(cudaMemset(x, 0x3F, 8 * 4096 * 2));
  CHECK(cudaMalloc(&out, size_t(active) * 64 * 512 * 4 * 8));  // up to 8 K splits
  CHECK(cudaMalloc(&sink, 4));
  std::vector<int> ids(size_t(sets) * active);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int((i * 37) % E);  // disjoint sets, beyond L2 between uses
  CHECK(cudaMalloc(&experts, ids.size() * 4));
  CHECK(cudaMemcpy(experts, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1; CHECK(cudaEventCreate(&e0)); CHECK(cudaEventCreate(&e1));
  int dev = 0, sms = 0; CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));

  // Warm to the power-capped steady state: two seconds of full-speed reads.
  if (!profile) {
    const size_t n = w_bytes / 16;
    cudaEventRecord(e0);
    for (int i = 0; i < 1000; ++i) {
      read_all<<<sms * 8, 512>>>(reinterpret_cast<const uint4*>(w), n, sink);
      cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      if (ms > 2000) break;
    }
  }
  auto time_it = [&](auto launch, int reps) {
    if (profile) { launch(0); CHECK(cudaDeviceSynchronize()); return 0.f; }
    std::vector<float> t;
    for (int r = 0; r < 5; ++r) {
      cudaEventRecord(e0);
      for (int i = 0; i < reps; ++i) launch(i);
      cudaEventRecord(e1); CHECK(cudaEventSynchronize(e1));
      float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms * 1000.f / reps);
    }
    std::sort(t.begin(), t.end());
    return t[2];
  };
  for (const Problem& pb : problems) {
    if (profile && &pb != &problems[0]) break;
    const size_t bytes = size_t(active) * pb.row_blocks * pb.k_atoms * (2048 + 128);
    // the floor: the same bytes, contiguous, one read kernel (expert sets rotate, as below)
    const size_t per_expert = size_t(64) * 64 * 2048;
    const float floor_us = time_it([&](int i) {
      read_all<<<sms * 8, 512>>>(reinterpret_cast<const uint4*>(w + size_t((i * active) % (E - active)) * per_expert),
                                 bytes / 16, sink);
    }, 200);
    printf("%s: %.1f MB per call; contiguous read %.2f us (%.2f TB/s)\n", pb.name, bytes / 1e6, floor_us, bytes / floor_us / 1e6);
    for (int ntok : {1, 8}) {
      if (profile && ntok != 1) break;
      auto run = [&](auto kernel, const char* what, int u, bool staged_tokens = false, int splits = 1) {
        const int smem = staged_tokens ? (pb.k_atoms / splits * 64 + 8) * 16 : 0;  // modes 3 and 7: token rows
        CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        const float us = time_it([&](int i) {
          kernel<<<active * pb.row_blocks * splits, 128, smem>>>(w, s, experts + (i % sets) * active, pb.row_blocks,
                                                                pb.k_atoms, x, ntok, out, splits);
        }, 200);
        CHECK(cudaGetLastError());
        printf("  tokens %d  U=%2d  %-34s %7.2f us  %.2f TB/s\n", ntok, u, what, us, bytes / us / 1e6);
      };
      if (ntok == 1) {
        run(decode_gemm<4, 0>, "loads", 4); run(decode_gemm<8, 0>, "loads", 8); run(decode_gemm<16, 0>, "loads", 16);
        run(decode_gemm<4, 1>, "loads+widen", 4); run(decode_gemm<8, 1>, "loads+widen", 8);
        run(decode_gemm<4, 4>, "loads+widen+FFMA", 4); run(decode_gemm<8, 4>, "loads+widen+FFMA", 8);
        run(decode_gemm<8, 5>, "widen+mma.sync, no loads", 8);
        run(decode_gemm<8, 6>, "loads+widen+mma.sync, 2 accs", 8);
      }
      run(decode_gemm<4, 2>, "loads+widen+mma.sync", 4); run(decode_gemm<8, 2>, "loads+widen+mma.sync", 8);
      run(decode_gemm<4, 7>, "loads+widen+mma.sync, B smem", 4, true);
      run(decode_gemm<8, 7>, "loads+widen+mma.sync, B smem", 8, true);
      run(decode_gemm<16, 7>, "loads+widen+mma.sync, B smem", 16, true);
      run(decode_gemm<8, 7>, "... split K 2 (not invariant)", 8, true, 2);
      run(decode_gemm<8, 7>, "... split K 4 (not invariant)", 8, true, 4);
      run(decode_gemm<4, 7>, "... split K 4 (not invariant)", 4, true, 4);
      run(decode_gemm<4, 7>, "... split K 8 (not invariant)", 4, true, 8);
      run(decode_gemm<4, 3>, "loads+widen+wgmma", 4, true); run(decode_gemm<8, 3>, "loads+widen+wgmma", 8, true);
    }
  }
  return ok ? 0 : 1;
}
