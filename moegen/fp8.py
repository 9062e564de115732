"""e4m3 operands for W4A8 on Hopper: MXFP4 weights folded into e4m3, activations per token.

FP8 wgmma reads e4m3 operands and has no block scales, so both operands carry their scales outside.

Weights.  An MXFP4 element is v * 2^s: v an e2m1 value (0, 0.5 ... 6), s its 32-group's e8m0
exponent.  Folding writes v * 2^(s - r) as e4m3, with one residual exponent r per expert (an exact
fp32 factor 2^r for the epilogue).  r = the expert's largest group exponent - FOLD_HEADROOM, so the
largest magnitude is 6 * 2^6 = 384 <= 448 (e4m3's largest) and nothing saturates.  A group
d = s - r <= 6 binades from the top folds exactly when d >= EXACT_MIN_D = -8: its smallest nonzero
magnitude 0.5 * 2^d is then >= 2^-9, e4m3's smallest subnormal, and the one mantissa bit of 1.5 and
3 lands on the subnormal grid (steps of 2^-9).  Deeper groups round to nearest even on that grid:
at d = -9, 0.5 * 2^-9 flushes to zero and 1.5 * 2^-9 becomes 2^-8; from d = -13 every element is
zero.  fold_report counts them for a checkpoint's scales (call it before serving one in W4A8).

The kernels widen with a table: per (row, 32-group) a byte indexes TABLE, whose entry holds the 8
e4m3 magnitudes (0, 0.5, 1, 1.5, 2, 3, 4, 6) * 2^d of its binade d; a code's 3 magnitude bits pick
one of them (one byte permute per 4 values) and its sign bit is ORed on.  Entries run from
d = TABLE_MIN_D (every magnitude rounds to zero there and below, so deeper groups clamp to it) to
FOLD_HEADROOM; each entry is the round-to-nearest-even e4m3 of the exact product, which is
fold_mxfp4's rounding: the table reproduces the fold bit for bit, inexact groups included.

Activations.  Each row (a token's hidden state, or its SwiGLU output) gets one fp32 scale
amax / 448, and its elements x / scale round to nearest even e4m3; an all-zero row gets scale 1.
"""
from __future__ import annotations

import torch

from . import mxfp4

E4M3_MAX = 448.0
FOLD_HEADROOM = 6  # 6 * 2^6 = 384 <= 448 < 6 * 2^7
EXACT_MIN_D = -8   # groups this many binades (and fewer) below the expert's top fold exactly
TABLE_MIN_D = -13  # 6 * 2^-13 < 2^-10, half e4m3's smallest subnormal: the whole group is zero
TABLE_ENTRIES = FOLD_HEADROOM - TABLE_MIN_D + 1


def _check_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> None:
    for name, t in (("packed", packed), ("scales", scales)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.dim() != 3:
            got = f"{t.dtype} shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"fold: expected {name} as uint8 [experts, N, ...], got {got}")
    if tuple(scales.shape) != (*packed.shape[:2], packed.shape[2] * 2 // mxfp4.BLOCK) or packed.shape[2] % 16:
        raise ValueError(f"fold: packed [E, N, K/2] needs scales [E, N, K/32]; got packed {tuple(packed.shape)} "
                         f"and scales {tuple(scales.shape)}")
    if bool((scales == mxfp4.E8M0_NAN).any()):
        raise ValueError("fold: a scale is e8m0 255 (NaN); expected finite scales")


def residual_exponents(scales: torch.Tensor) -> torch.Tensor:
    """r per expert (int32 [E]): its largest group exponent minus FOLD_HEADROOM."""
    top = scales.reshape(scales.shape[0], -1).to(torch.int32).amax(dim=1) - mxfp4.E8M0_BIAS
    return top - FOLD_HEADROOM


def fold_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4 experts [E, N, K/2] + [E, N, K/32] -> (float8_e4m3fn [E, N, K], r int32 [E]); the
    weights are w_e4m3 * 2^r[e]."""
    _check_mxfp4(packed, scales)
    r = residual_exponents(scales)
    values = mxfp4.E2M1_VALUES.to(packed.device)[mxfp4.unpack_codes(packed)].to(torch.float64)
    d = scales.to(torch.int32) - mxfp4.E8M0_BIAS - r.view(-1, 1, 1)  # <= FOLD_HEADROOM
    # 2^d exactly in float64 (d >= -254 - 6), the product exact too; float64 -> e4m3 rounds once
    # (torch rounds to nearest even, subnormals included).
    factor = torch.pow(torch.tensor(2.0, dtype=torch.float64, device=packed.device), d.to(torch.float64))
    folded = values.reshape(*scales.shape, mxfp4.BLOCK) * factor.unsqueeze(-1)
    return folded.reshape(values.shape).to(torch.float8_e4m3fn), r


def unfold(w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """float64 [E, N, K] of folded weights: what the W4A8 kernel multiplies by."""
    factor = torch.pow(torch.tensor(2.0, dtype=torch.float64, device=w.device), r.to(torch.float64))
    return w.to(torch.float64) * factor.view(-1, 1, 1)


def table_index(d: torch.Tensor) -> torch.Tensor:
    """The widening table's entry (uint8) for groups d binades from their expert's residual."""
    return (d.clamp(TABLE_MIN_D, FOLD_HEADROOM) - TABLE_MIN_D).to(torch.uint8)


def widening_table() -> torch.Tensor:
    """uint8 [TABLE_ENTRIES, 8]: entry i, byte m = e4m3(magnitude m * 2^(i + TABLE_MIN_D)), the
    magnitudes in e2m1 code order (the kernels build the same table in shared memory)."""
    d = torch.arange(TABLE_ENTRIES, dtype=torch.float64) + TABLE_MIN_D
    values = mxfp4.E2M1_VALUES[:8].to(torch.float64).view(1, 8) * torch.pow(2.0, d).view(-1, 1)
    return values.to(torch.float8_e4m3fn).view(torch.uint8)


def fold_report(scales: torch.Tensor) -> dict[str, int]:
    """How many 32-groups fold exactly and how many lose bits (d < EXACT_MIN_D), over all experts."""
    d = scales.to(torch.int32) - mxfp4.E8M0_BIAS - residual_exponents(scales).view(-1, 1, 1)
    return dict(groups=int(d.numel()), inexact=int((d < EXACT_MIN_D).sum()), deepest_d=int(d.min()))


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of x [..., K] -> (float8_e4m3fn [..., K], fp32 scale [...]): x ~ q * scale."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() == 0:
        raise ValueError(f"quantize_per_token: expected a floating-point tensor with rows, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    x32 = x.to(torch.float32)
    amax = x32.abs().amax(dim=-1)
    # Divided by a tensor: torch divides a CUDA tensor by a Python number as a multiplication by its
    # reciprocal, one ulp off IEEE division for about half of all amax values.  Where the exact scale
    # puts elements on e4m3 ties (5 of the 128 bf16 mantissas of amax, 1.3125 among them: 1-4 % of
    # the row's elements), those rounded away from the kernels' (__fdiv_rn), and a DeepSeek-V3 token
    # measured 2.8e-2 against the kernel.
    scale = torch.where(amax > 0, amax / torch.full_like(amax, E4M3_MAX), torch.ones_like(amax))
    q = (x32 / scale.unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def round_trip_per_token(x: torch.Tensor) -> torch.Tensor:
    """x as a W4A8 kernel sees it after per-token quantization (float64)."""
    q, scale = quantize_per_token(x)
    return q.to(torch.float64) * scale.to(torch.float64).unsqueeze(-1)
