// SM90: e2m1 -> bf16 conversion in registers, with the e8m0 block scale folded into one bf16 multiply.
//
// Hopper has no FP4 datapath, so the mainloop widens 8 nibbles (one 32-bit word, laid out by
// moegen.prepare) into the 4 bf16x2 registers of a wgmma A fragment:
//  * bit moves put the nibble's sign at bf16 bit 15 and its exponent+mantissa (3 bits) at bits
//    8..6, which reads as  value * 2^-126  (e2m1 bias 1 vs bf16 bias 127; 0.5 lands on a bf16
//    subnormal, which half-precision arithmetic keeps);
//  * one bf16x2 multiply by 2^(s-1) restores the bias and applies the block scale 2^(s-127).
//    s is the e8m0 exponent minus a per-expert shift (multiplied back in fp32 by the epilogue),
//    clamped to [0, 128], so 2^(s-1) is always a normal bf16 and the product is exact.  prepare
//    stores the byte s + 126, which is 2^(s-1)'s bf16 exponent field (padding stores 0: a zero
//    multiplier).  One shift and one AND place two such bytes in a bf16x2 (both scale groups of an
//    atom's row), and each multiply broadcasts the half it needs (.H0_H0 / .H1_H1 operands, free).
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

namespace moegen::sm90 {

// Both multipliers of a fragment row in one bf16x2: low half scale group 0, high half group 1 of
// the atom.  The stored word is [(g, 0) (g+8, 0) (g, 1) (g+8, 1)]: rows g take bytes 0 and 2, rows
// g + 8 bytes 1 and 3, each moved onto the bf16 exponent field (bits 7..14 of its half): one
// shift and one AND per row pair, not a byte permute and a shift per multiplier.
__device__ __forceinline__ uint32_t scale_pair_rows_g(uint32_t scale_word) { return (scale_word << 7) & 0x7F807F80u; }
__device__ __forceinline__ uint32_t scale_pair_rows_g8(uint32_t scale_word) { return (scale_word >> 1) & 0x7F807F80u; }

// a * (one half of m, in both lanes): ptxas folds the broadcast into the multiply's operand.
template <bool kHigh>
__device__ __forceinline__ uint32_t bf16x2_mul_half(uint32_t a, uint32_t m) {
  const __nv_bfloat162 mm = *reinterpret_cast<__nv_bfloat162*>(&m);
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), kHigh ? __high2bfloat162(mm) : __low2bfloat162(mm));
  return *reinterpret_cast<uint32_t*>(&r);
}

// Bit layout of a prepared word (moegen/prepare.py, e2m1_word_bits): output register j holds two
// values (low half: even k, high half: odd k); each value's sign, e1, e0, m bits sit where one left
// rotation moves them onto bf16 bits 15, 8, 7, 6 (and 31, 24, 23, 22):
//   j=0: as is     j=1: rotate 4     j=2: rotate 10     j=3: e1 rotates 14, the other bits 6
// (no four rotations tile the word, so j = 3 takes two).  9 bit operations per 8 values.
// out[0], out[2] belong to fragment row g and are scaled by pair_g; out[1], out[3] to row g+8.
__device__ __forceinline__ uint32_t rotl(uint32_t x, int n) { return __funnelshift_l(x, x, n); }

// kGroup1: the word's values lie in the atom's second 32-wide scale group (high halves of the pairs).
template <bool kGroup1>
__device__ __forceinline__ void e2m1x8_to_bf16x8(uint32_t q, uint32_t pair_g, uint32_t pair_g8, uint32_t (&out)[4]) {
  constexpr uint32_t kValue = 0x81C081C0u;  // sign | e1 e0 m, both halves
  constexpr uint32_t kE1 = 0x01000100u;     // bf16 bits 8 and 24
  out[0] = bf16x2_mul_half<kGroup1>(q & kValue, pair_g);
  out[1] = bf16x2_mul_half<kGroup1>(rotl(q, 4) & kValue, pair_g8);
  out[2] = bf16x2_mul_half<kGroup1>(rotl(q, 10) & kValue, pair_g);
  out[3] = bf16x2_mul_half<kGroup1>((rotl(q, 6) & (kValue & ~kE1)) | (rotl(q, 14) & kE1), pair_g8);
}

// W4A8: e2m1 -> e4m3 by table.  An e4m3 wgmma A fragment register holds 4 values of one row and one
// 32-group, so one table serves a word: `table` holds the 8 e4m3 magnitudes (0, 0.5 ... 6) x 2^d of
// the group's binade d (moegen.fp8.widening_table, built per CTA in shared memory), and each value's
// 3 magnitude bits select its byte.  moegen.prepare (pack_sm90_e4m3) puts register lo's magnitudes in
// nibbles 0-3 and signs at bits 3, 11, 19, 27, register hi's magnitudes in nibbles 4-7 and signs at
// bits 7, 15, 23, 31: one AND, two byte permutes, one shift and two AND-ORs per 8 values.
__device__ __forceinline__ void e2m1x8_to_e4m3x8(uint32_t q, uint2 table, uint32_t& lo, uint32_t& hi) {
  const uint32_t magnitudes = q & 0x77777777u;  // selector nibbles 0..7 (bit 3 would replicate signs)
  lo = __byte_perm(table.x, table.y, magnitudes) | ((q << 4) & 0x80808080u);
  hi = __byte_perm(table.x, table.y, magnitudes >> 16) | (q & 0x80808080u);
}

}  // namespace moegen::sm90
