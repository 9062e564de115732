"""MXFP8 activations (OCP MX: e4m3 elements sharing one e8m0 scale per 32 along K), as the SM100 layer
quantizes them: hidden states before GEMM1 and the SwiGLU output before GEMM2.

The shared exponent is the smallest e with amax <= 448 * 2^e (448: e4m3's largest value), so no
element saturates: amax = m * 2^e0 with m in [1, 2) gives e = e0 - 8, plus one when m > 1.75.
Elements are x * 2^-e rounded to nearest even e4m3; an all-zero block gets e = -127 (byte 0).
The arch-neutral CUDA quantizer (templates/include/moegen/quantize.cuh) computes exactly this.
"""
from __future__ import annotations

import torch

BLOCK = 32
E4M3_MAX = 448.0
E8M0_BIAS = 127


def quantize_mxfp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize along the last dimension (a multiple of 32): (float8_e4m3fn [..., K], uint8 e8m0 [..., K/32])."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0 or x.shape[-1] % BLOCK:
        raise ValueError(f"quantize_mxfp8: expected a floating-point tensor whose last dimension is a multiple of "
                         f"{BLOCK}, got {tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    blocks = x.to(torch.float32).reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=-1)
    m, e0 = torch.frexp(amax)  # amax = m * 2^e0, m in [0.5, 1)
    e = (e0 - 1 - 8) + (m * 2 > 1.75).to(e0.dtype)
    e = torch.where(amax == 0, torch.full_like(e, -E8M0_BIAS), e.clamp(-E8M0_BIAS, E8M0_BIAS))
    scaled = blocks * torch.pow(2.0, -e.to(torch.float64)).to(torch.float32).unsqueeze(-1)
    q = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.reshape(x.shape), (e + E8M0_BIAS).to(torch.uint8)


def dequantize_mxfp8(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """float32 [..., K] of MXFP8 values and their e8m0 scales."""
    blocks = q.to(torch.float32).reshape(*scales.shape, BLOCK)
    return (blocks * torch.pow(2.0, scales.to(torch.float64) - E8M0_BIAS).to(torch.float32).unsqueeze(-1)).reshape(q.shape)


def round_trip_mxfp8(x: torch.Tensor) -> torch.Tensor:
    """x as the SM100 kernels see it after quantization (float64 [..., K]); K padded with zeros to 32."""
    pad = (-x.shape[-1]) % BLOCK
    xp = torch.nn.functional.pad(x.to(torch.float32), (0, pad)) if pad else x
    q, s = quantize_mxfp8(xp)
    out = dequantize_mxfp8(q, s).to(torch.float64)
    return out[..., :x.shape[-1]] if pad else out
