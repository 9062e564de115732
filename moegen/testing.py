"""Random MoE problems and their float64 reference, shared by the GPU tests, the sanitizer run and
the benchmark.  Weights are drawn directly as MXFP4 codes and scales (valid checkpoints of any
size without materializing float weights); the reference dequantizes one expert at a time."""
from __future__ import annotations

from types import MappingProxyType
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


# Relative L2 error a correct library stays within against the float64 reference in its activation
# format (reference_output): BF16 activations (SM90) 5e-3: rounding `h` and the output to bf16 is all
# that remains (2.25-2.47e-3 on every GPU-tested variant, H200, every kernel alike), but a split with few
# intermediate columns per rank spreads it over few values (simulated, one token: Qwen3-30B-A3B --tp 8,
# 96 columns, up to 3.4e-3), and any split must pass; a kernel twice that wrong does not.  W4A8 (SM90,
# fp8) 1e-2 against its own reference: FP8 wgmma's reduced-precision accumulation moves a few `h`
# elements across an e4m3 rounding step (H200, every shipped model, two runs: 1.9e-3 - 8.5e-3, at most
# 5.0e-3 from 16 rows).  MXFP8 (SM100) the same against its reference (the same quantization and bf16
# roundings, then exact arithmetic): fp32 accumulation simulated on the CPU gives 1.6-1.7e-3 at one
# token (tests/test_reference.py), and the tensor cores' accumulation on a B200 is not yet measured.
# A layout, scale or synchronization error is O(1).
TOLERANCE = MappingProxyType({"bf16": 5e-3, "mxfp8": 1e-2, "fp8": 1e-2})
# FP8 activations below this many output rows: a row's error is a handful of flipped `h` elements, each a whole e4m3
# step, and the largest elements of a SwiGLU row hold 15-40 % of its norm, so one row's error is
# heavy-tailed (H200, one token over 20 draws: DeepSeek-V3 1.8e-3 - 8.8e-3, gpt-oss-20b 1.7e-3 - 1.25e-2;
# a 1e-4 relative perturbation of GEMM1's output moves the reference itself by up to 1.1e-2 per token).
# The bound widens as 1 / sqrt(rows), as one such row's share of a pooled error shrinks (4e-2 for one).
FP8_ROWS_FOR_FULL_BOUND = 16


def tolerance(activation_format: str, rows: int) -> float:
    """The relative L2 bound for an error measured over `rows` output rows (pooled draws add up)."""
    bound = TOLERANCE[activation_format]
    if activation_format in ("fp8", "mxfp8") and 0 < rows < FP8_ROWS_FOR_FULL_BOUND:
        return bound * math.sqrt(FP8_ROWS_FOR_FULL_BOUND / rows)
    return bound


def relative_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    denom = ref.norm().item()
    return (out.double() - ref).norm().item() / (denom if denom > 0 else 1.0)


@dataclass
class BatchedRows:
    """Rows grouped by local expert, as a low-latency expert-parallel dispatch delivers them."""
    hidden: torch.Tensor  # bf16 [E_local, M, H]
    counts: torch.Tensor  # int32 [E_local]
    written: torch.Tensor  # bool [E_local, M]: the rows the counts cover


def batched_rows(spec: ModelSpec, hidden: torch.Tensor, ids: torch.Tensor) -> BatchedRows:
    """The rows these tokens' choices (global ids [T, top_k]) send to this rank's experts: per local
    expert its (token, slot) pairs in token order, M the largest count."""
    E = spec.local_experts
    local = ids.long() - spec.expert_begin
    token = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(local)
    on = (local >= 0) & (local < E)
    expert, token = local[on], token[on]
    order = torch.sort(expert * ids.shape[0] + token).indices  # by expert, then token
    expert, token = expert[order], token[order]
    counts = torch.bincount(expert, minlength=E)
    M = int(counts.max()) if expert.numel() else 0
    position = torch.arange(expert.numel(), device=ids.device) - (torch.cumsum(counts, 0) - counts)[expert]
    rows = torch.zeros((E, M, spec.hidden_size), dtype=hidden.dtype, device=hidden.device)
    rows[expert, position] = hidden[token]
    return BatchedRows(rows, counts.to(torch.int32), torch.arange(M, device=ids.device)[None, :] < counts[:, None])


def batched_reference(spec: ModelSpec, w: Weights, rows: torch.Tensor, kept: torch.Tensor,
                      activation_format: str = "bf16") -> torch.Tensor:
    """float64 outputs of the first kept[e] rows of each local expert e, in that order, unweighted:
    each row a token whose first slot goes to e with weight 1 and whose other slots weigh 0."""
    E = spec.local_experts
    local = torch.repeat_interleave(torch.arange(E, device=rows.device), kept.long())
    written = torch.arange(rows.shape[1], device=rows.device)[None, :] < kept.long()[:, None]
    ids = (spec.expert_begin + local)[:, None].repeat(1, spec.top_k)
    weights = torch.zeros(ids.shape, dtype=torch.float64, device=rows.device)
    weights[:, 0] = 1
    experts = reference.FoldedMXFP4Experts if activation_format == "fp8" else reference.MXFP4Experts
    return reference.moe(spec, rows[written], ids, weights, experts(w.w13, w.s13), experts(w.w2, w.s2), w.b13, w.b2,
                         activation_format=activation_format)
