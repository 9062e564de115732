"""OCP Microscaling (MX) v1.0 MXFP4: e2m1 elements sharing one e8m0 scale per 32 along K.

Layout (what the kernels read):
  packed uint8 [..., K//2]: element 2i in the low nibble of byte i, element 2i+1 in the high nibble.
  scales uint8 [..., K//32]: e8m0 biased exponents; a block's value = e2m1 code value * 2^(e8m0 - 127).

Pure torch, works on any device.  quantize is exact (no float rounding besides the e2m1 one).
"""
from __future__ import annotations

import torch

BLOCK = 32  # elements sharing one scale
E2M1_EMAX = 2  # largest e2m1 value is 6 = 1.5 * 2^2
E8M0_BIAS = 127
E8M0_NAN = 255

# Code -> value; bit 3 is the sign, so code 8 is -0.0.
E2M1_VALUES = torch.tensor(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=torch.float32)

# Code of a non-negative e2m1 value, indexed by 2 * value (0, 0.5, 1, 1.5, 2, 3, 4, 6 -> 0..7).
_CODE_OF_TWICE_VALUE = torch.tensor([0, 1, 2, 3, 4, 0, 5, 0, 6, 0, 0, 0, 7], dtype=torch.uint8)


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize along the last dimension; returns (packed uint8 [..., K//2], scales uint8 [..., K//32])."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"quantize: expected a floating-point tensor, got "
                         f"{x.dtype if isinstance(x, torch.Tensor) else type(x).__name__}")
    if x.device.type == "meta":
        raise ValueError("quantize: got a meta tensor (no data); expected a tensor with values")
    if x.element_size() == 1:  # float8: widen first (torch has no isfinite for it); e4m3fn has no inf
        x = x.to(torch.float32)
    if x.dim() == 0 or x.shape[-1] % BLOCK:
        k = x.shape[-1] if x.dim() else None
        raise ValueError(f"quantize: last dimension K must be a multiple of {BLOCK}, got K={k} "
                         f"(shape {tuple(x.shape)})")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("quantize: input has non-finite values (NaN or inf); MXFP4 cannot encode them")

    # float64 holds every input dtype exactly and keeps x * 2^-shared_exp exact.
    blocks = x.to(torch.float64).reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=-1)
    # frexp: amax = m * 2^e with m in [0.5, 1), so floor(log2(amax)) = e - 1, exactly.
    _, e = torch.frexp(amax)
    shared_exp = (e.to(torch.int32) - 1 - E2M1_EMAX).clamp(-E8M0_BIAS, E8M0_BIAS)
    shared_exp = torch.where(amax == 0, torch.full_like(shared_exp, -E8M0_BIAS), shared_exp)

    scaled = blocks.abs() * _pow2(-shared_exp).unsqueeze(-1)
    magnitude = _round_to_e2m1(scaled)
    codes = _CODE_OF_TWICE_VALUE.to(x.device)[(magnitude * 2).to(torch.int64)]
    codes = codes | (torch.signbit(blocks).to(torch.uint8) << 3)

    codes = codes.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    packed = codes[..., 0] | (codes[..., 1] << 4)
    scales = (shared_exp + E8M0_BIAS).to(torch.uint8)
    return packed, scales


def _round_to_e2m1(a: torch.Tensor) -> torch.Tensor:
    """Round non-negative a to the e2m1 grid, ties to even mantissa, saturating at 6.

    Within a binade the grid is uniform (step 0.5 below 2, 1 in [2, 4), 2 in [4, 8)), and the
    binade's first value has an even mantissa, so torch.round (half to even) on a / step is RNE.
    """
    _, e = torch.frexp(a)  # floor(log2(a)) = e - 1; a = 0 gives e = 0, i.e. the step-0.5 range
    steps = _pow2((e - 1).clamp(min=0) - 1)
    return (torch.round(a / steps) * steps).clamp(max=6.0)


def _pow2(exp: torch.Tensor) -> torch.Tensor:
    """2^exp as float64 built from its bits (exact on every device; exp must be in [-1022, 1023])."""
    return ((exp.to(torch.int64) + 1023) << 52).view(torch.float64)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """e2m1 codes (int64 [..., K]) of packed bytes [..., K/2]: low nibble first."""
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2).to(torch.int64)


def dequantize(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Inverse of quantize: float32 [..., K]. e8m0 255 (NaN per the spec) gives NaN.

    Note: e8m0 >= 253 with large codes exceeds float32 range and gives inf; quantize of float32
    input never produces such scales.
    """
    for name, t in (("packed", packed), ("scales", scales)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.dim() == 0:
            got = f"{t.dtype} shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"dequantize: expected {name} as a uint8 tensor with at least 1 dim, got {got}")
    expected = (*packed.shape[:-1], packed.shape[-1] * 2 // BLOCK)
    if packed.shape[-1] % (BLOCK // 2) or tuple(scales.shape) != expected:
        raise ValueError(f"dequantize: packed [..., K//2] needs scales [..., K//32]; expected packed last dim "
                         f"a multiple of {BLOCK // 2} and scales shape {expected}, got packed "
                         f"{tuple(packed.shape)} and scales {tuple(scales.shape)}")

    values = E2M1_VALUES.to(packed.device)[unpack_codes(packed)]
    # Build 2^(e8m0-127) from float32 bits: exact, including 2^-127 (subnormal) and NaN for 255.
    e = scales.to(torch.int32)
    bits = torch.where(e == 0, torch.full_like(e, 1 << 22), e << 23)
    bits = torch.where(e == E8M0_NAN, torch.full_like(e, 0x7FC00000), bits)
    scale = bits.view(torch.float32)
    blocks = values.reshape(*scales.shape, BLOCK) * scale.unsqueeze(-1)
    return blocks.reshape(values.shape)
