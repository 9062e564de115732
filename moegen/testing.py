"""Random MoE problems and their float64 reference, shared by the GPU tests, the sanitizer run and
the benchmark.  Weights are drawn directly as MXFP4 codes and scales (valid checkpoints of any
size without materializing float weights); the reference dequantizes one expert at a time."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import reference
from .layout import SM90_ATOMS, PreparedWeights
from .prepare import prepare
from .spec import ModelSpec


@dataclass
class Weights:
    w13: torch.Tensor  # raw e2m1 pairs [E_local, 2I, H/2], gate rows then up rows
    s13: torch.Tensor
    w2: torch.Tensor
    s2: torch.Tensor
    b13: torch.Tensor | None
    b2: torch.Tensor | None
    prepared: PreparedWeights


def _scale_exponents(shape, k: int, gen: torch.Generator, device) -> torch.Tensor:
    # Uniform e2m1 codes have RMS ~2.9; aim each dot product of length k at O(1) outputs.
    center = 127 - round(math.log2(2.9 * math.sqrt(k)))
    return torch.randint(center - 1, center + 2, shape, generator=gen, device=device, dtype=torch.int32).to(torch.uint8)


def random_weights(spec: ModelSpec, device, seed: int, layout: str = SM90_ATOMS.name) -> Weights:
    """Random MXFP4 experts, raw and prepared in `layout` (a layer's: layer.weight_layout)."""
    g = torch.Generator(device=device).manual_seed(seed)
    E, H, I = spec.local_experts, spec.hidden_size, spec.local_intermediate
    w13 = torch.randint(0, 256, (E, 2 * I, H // 2), generator=g, device=device, dtype=torch.int32).to(torch.uint8)
    w2 = torch.randint(0, 256, (E, H, I // 2), generator=g, device=device, dtype=torch.int32).to(torch.uint8)
    s13 = _scale_exponents((E, 2 * I, H // 32), H, g, device)
    s2 = _scale_exponents((E, H, I // 32), I, g, device)
    b13 = 0.1 * torch.randn((E, 2 * I), generator=g, device=device) if spec.gemm1_bias else None
    b2 = 0.1 * torch.randn((E, H), generator=g, device=device) if spec.gemm2_bias else None
    return Weights(w13, s13, w2, s2, b13, b2, prepare(spec, w13, s13, w2, s2, b13, b2, layout=layout))


@dataclass
class Inputs:
    hidden: torch.Tensor  # bf16 [T, H]
    logits: torch.Tensor  # f32 [T, E]
    score_bias: torch.Tensor | None


def random_inputs(spec: ModelSpec, num_tokens: int, device, seed: int, skew: bool = False) -> Inputs:
    """skew=True routes every token to the same top_k experts (the first local ones)."""
    g = torch.Generator(device=device).manual_seed(seed)
    hidden = torch.randn((num_tokens, spec.hidden_size), generator=g, device=device).to(torch.bfloat16)
    logits = torch.randn((num_tokens, spec.num_experts), generator=g, device=device)
    if skew:
        first = spec.expert_begin
        logits[:, first:first + spec.top_k] += 30.0
    bias = 0.1 * torch.randn((spec.num_experts,), generator=g, device=device) if spec.router.score_bias else None
    return Inputs(hidden, logits, bias)


def reference_output(spec: ModelSpec, w: Weights, x: Inputs, ids: torch.Tensor,
                     activation_format: str = "bf16") -> torch.Tensor:
    """float64 layer output for the given expert choice (weights recomputed by the reference router);
    activation_format as the library's manifest says (reference.moe)."""
    ids = ids.long()
    weights = reference.route_weights(spec, x.logits, x.score_bias, ids)
    # W4A8 kernels multiply by the e4m3-folded weights (exact for every group but those more than 8
    # binades below their expert's top): the reference does too.
    experts = reference.FoldedMXFP4Experts if activation_format == "fp8" else reference.MXFP4Experts
    return reference.moe(spec, x.hidden, ids, weights, experts(w.w13, w.s13), experts(w.w2, w.s2), w.b13, w.b2,
                         activation_format=activation_format)


def relative_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    denom = ref.norm().item()
    return (out.double() - ref).norm().item() / (denom if denom > 0 else 1.0)
