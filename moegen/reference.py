"""float64 PyTorch reference of a whole MoE layer: routing, expert GEMMs, activation, combine.

Slow but simple; the GPU kernels are checked against it.  Weight layout:
  w13 [E_local, 2*I_local, H]: rows [0, I_local) the gate projection W1, rows [I_local, 2*I_local) the up W3.
  w2  [E_local, H, I_local].
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from moegen.mxfp4 import dequantize
from moegen.fp8 import fold_mxfp4, round_trip_per_token, unfold
from moegen.mxfp8 import round_trip_mxfp8
from moegen.spec import ModelSpec

Tensor = torch.Tensor


@dataclass(frozen=True)
class Routing:
    ids: Tensor  # int64 [T, top_k], global expert ids, best first
    weights: Tensor  # float64 [T, top_k]
    margin: Tensor  # float64 [T]: smallest score gap that decided the token's selection (0 = tie)


class MXFP4Experts:
    """Per-expert MXFP4 weights [E, N, K] dequantized on access, so the reference of a large model
    never holds all experts in float at once: ``experts[e]`` is a float32 [N, K] tensor."""

    def __init__(self, packed: Tensor, scales: Tensor):
        self.packed, self.scales = packed, scales
        self.shape = (*packed.shape[:-1], packed.shape[-1] * 2)

    def __getitem__(self, e: int) -> Tensor:
        return dequantize(self.packed[e], self.scales[e])


class FoldedMXFP4Experts(MXFP4Experts):
    """The same experts as the W4A8 kernels multiply by: folded to e4m3 with a per-expert residual
    (moegen.fp8.fold_mxfp4), one expert at a time: ``experts[e]`` is a float64 [N, K] tensor."""

    def __getitem__(self, e: int) -> Tensor:
        return unfold(*fold_mxfp4(self.packed[e:e + 1], self.scales[e:e + 1]))[0]


def _check_shape(name: str, t: Tensor, expected: tuple[int, ...]) -> None:
    if not isinstance(t, (torch.Tensor, MXFP4Experts)):
        raise ValueError(f"{name}: expected a tensor of shape {expected}, got {type(t).__name__}")
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name}: expected shape {tuple(expected)}, got {tuple(t.shape)}")


def _check_optional(name: str, t: Tensor | None, wanted: bool, expected: tuple[int, ...], why: str) -> None:
    if wanted and t is None:
        raise ValueError(f"{name}: expected a tensor of shape {tuple(expected)} ({why}), got None")
    if not wanted and t is not None:
        raise ValueError(f"{name}: expected None (spec has no {why}), got shape {tuple(t.shape)}")
    if t is not None:
        _check_shape(name, t, expected)


def _check_router_inputs(spec: ModelSpec, logits: Tensor, score_bias: Tensor | None) -> None:
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.shape[1] != spec.num_experts:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits: expected shape (T, {spec.num_experts}), got {got}")
    _check_optional("score_bias", score_bias, spec.router.score_bias, (spec.num_experts,), "router.score_bias")


def _rank(values: Tensor) -> tuple[Tensor, Tensor]:
    """Sort descending along the last dim; ties keep the lower index first (stable sort)."""
    return torch.sort(values, dim=-1, descending=True, stable=True)


def _gap(sorted_values: Tensor, k: int) -> Tensor:
    """k-th best minus (k+1)-th best; +inf when there is no (k+1)-th."""
    if k >= sorted_values.shape[-1]:
        return torch.full(sorted_values.shape[:-1], math.inf, dtype=sorted_values.dtype,
                          device=sorted_values.device)
    return sorted_values[..., k - 1] - sorted_values[..., k]


def _scores(kind: str, logits: Tensor) -> Tensor:
    """Per-expert scores the weights are made from (float64): sigmoid (DeepSeek-V3), sqrt(softplus)
    (DeepSeek-V4), softmax over all experts (Qwen3)."""
    if kind == "sigmoid_group_topk":
        return torch.sigmoid(logits)
    if kind == "sqrtsoftplus_topk":
        return torch.sqrt(logits.clamp(min=0) + torch.log1p(torch.exp(-logits.abs())))
    return torch.softmax(logits, dim=-1)


def route(spec: ModelSpec, logits: Tensor, score_bias: Tensor | None = None) -> Routing:
    """Select each token's top_k experts (global ids) and their combine weights, in float64."""
    _check_router_inputs(spec, logits, score_bias)
    r = spec.router
    logits = logits.to(torch.float64)
    T, E = logits.shape

    if r.kind == "sqrtsoftplus_topk":
        selection = _scores(r.kind, logits)
        if score_bias is not None:
            selection = selection + score_bias.to(torch.float64)
        group_margin, n_allowed = None, E
    elif r.kind == "sigmoid_group_topk":
        selection = _scores(r.kind, logits)
        if score_bias is not None:
            selection = selection + score_bias.to(torch.float64)
        grouped = selection.view(T, r.n_group, E // r.n_group)
        if r.group_score == "max":
            group_scores = grouped.amax(dim=-1)
        else:  # top2_sum
            group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        sorted_groups, group_order = _rank(group_scores)
        group_margin = _gap(sorted_groups, r.topk_group)
        kept = torch.zeros(T, r.n_group, dtype=torch.bool, device=logits.device)
        kept.scatter_(1, group_order[:, :r.topk_group], True)
        allowed = kept.repeat_interleave(E // r.n_group, dim=1)
        selection = selection.masked_fill(~allowed, -math.inf)
        n_allowed = r.topk_group * (E // r.n_group)
    elif r.kind == "softmax_topk":
        selection, group_margin, n_allowed = torch.softmax(logits, dim=-1), None, E
    else:  # topk_softmax: select on the raw logits
        selection, group_margin, n_allowed = logits, None, E

    sorted_sel, order = _rank(selection)
    ids = order[:, :r.top_k]
    margin = _gap(sorted_sel[:, :n_allowed], r.top_k)  # masked-out experts are sorted last
    if group_margin is not None:
        margin = torch.minimum(margin, group_margin)
    return Routing(ids=ids, weights=route_weights(spec, logits, score_bias, ids), margin=margin)


def route_weights(spec: ModelSpec, logits: Tensor, score_bias: Tensor | None, ids: Tensor) -> Tensor:
    """The combine weights the router gives for the given ids [T, top_k] (float64 [T, top_k]).

    score_bias only steers selection, so it does not enter the weights; it is checked for symmetry with route.
    """
    _check_router_inputs(spec, logits, score_bias)
    _check_ids(spec, ids, logits.shape[0])
    r = spec.router
    logits = logits.to(torch.float64)
    ids = ids.to(device=logits.device, dtype=torch.int64)

    if r.kind == "topk_softmax":
        weights = torch.softmax(logits.gather(1, ids), dim=-1)
    else:
        weights = _scores(r.kind, logits).gather(1, ids)
        if r.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * r.routed_scaling_factor


def _check_ids(spec: ModelSpec, ids: Tensor, T: int) -> None:
    _check_shape("ids", ids, (T, spec.top_k))
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"ids: expected an integer tensor, got {ids.dtype}")
    if ids.numel() and not bool(((ids >= 0) & (ids < spec.num_experts)).all()):
        raise ValueError(f"ids: expected global expert ids in [0, {spec.num_experts}), "
                         f"got values in [{int(ids.min())}, {int(ids.max())}]")


def activation(spec: ModelSpec, gate: Tensor, up: Tensor) -> Tensor:
    a = spec.activation
    if a.limit is not None:
        gate = gate.clamp(max=a.limit)  # the gate is clamped above only
        up = up.clamp(-a.limit, a.limit)
    if a.kind == "swiglu":
        return F.silu(gate) * up
    return gate * torch.sigmoid(a.alpha * gate) * (up + 1)  # swiglu_oai


ACTIVATION_FORMATS = ("bf16", "mxfp8", "fp8")


def moe(spec: ModelSpec, hidden: Tensor, ids: Tensor, weights: Tensor, w13: Tensor, w2: Tensor,
        b13: Tensor | None = None, b2: Tensor | None = None, activation_format: str = "bf16") -> Tensor:
    """This rank's share of the MoE output, float64 [T, H]; slots routed to other EP ranks add nothing.

    activation_format "mxfp8": the GEMMs' activations are quantized as the SM100 layer quantizes them
    (the hidden states before GEMM1, the SwiGLU output before GEMM2: moegen.mxfp8), and each GEMM's
    output is rounded to bf16 before its bias, as the layer stores it (sm100/pipeline.cuh); the
    arithmetic is otherwise exact; "fp8": the same two, per row to e4m3 with an fp32 scale (W4A8: moegen.fp8),
    the SwiGLU output first rounded to bf16 as the SM90 GEMM1 writes it (pass the folded weights,
    FoldedMXFP4Experts, to match its kernels); "bf16": the hidden states as given."""
    if activation_format not in ACTIVATION_FORMATS:
        raise ValueError(f"activation_format {activation_format!r}: expected one of {ACTIVATION_FORMATS}")
    H, I, E_local = spec.hidden_size, spec.local_intermediate, spec.local_experts
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2 or hidden.shape[1] != H:
        got = tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        raise ValueError(f"hidden: expected shape (T, {H}), got {got}")
    T = hidden.shape[0]
    _check_ids(spec, ids, T)
    _check_shape("weights", weights, (T, spec.top_k))
    _check_shape("w13", w13, (E_local, 2 * I, H))
    _check_shape("w2", w2, (E_local, H, I))
    _check_optional("b13", b13, spec.gemm1_bias, (E_local, 2 * I), "gemm1 bias")
    _check_optional("b2", b2, spec.gemm2_bias, (E_local, H), "gemm2 bias")

    f64 = dict(dtype=torch.float64, device=hidden.device)
    quantized = {"bf16": lambda t: t, "mxfp8": round_trip_mxfp8, "fp8": round_trip_per_token}[activation_format]
    quantized_h = (lambda t: round_trip_per_token(t.to(torch.bfloat16))) if activation_format == "fp8" else quantized
    # SM100 stores both GEMMs' outputs in bf16 (its bias and routing weight come after, in fp32)
    stored = (lambda t: t.to(torch.bfloat16).to(torch.float64)) if activation_format == "mxfp8" else (lambda t: t)
    x_all, weights = quantized(hidden).to(**f64), weights.to(**f64)
    ids = ids.to(device=hidden.device, dtype=torch.int64)
    out = torch.zeros(T, H, **f64)
    for e in range(E_local):
        tokens, slots = torch.nonzero(ids == spec.expert_begin + e, as_tuple=True)
        if tokens.numel() == 0:
            continue
        gu = stored(x_all[tokens] @ w13[e].to(**f64).T)
        if b13 is not None:
            gu = gu + b13[e].to(**f64)
        h = activation(spec, gu[:, :I], gu[:, I:])
        y = stored(quantized_h(h).to(**f64) @ w2[e].to(**f64).T)
        if b2 is not None:
            y = y + b2[e].to(**f64)
        out.index_add_(0, tokens, y * weights[tokens, slots].unsqueeze(1))
    return out


def shard_weights(spec_full: ModelSpec, w13: Tensor, w2: Tensor, b13: Tensor | None, b2: Tensor | None,
                  tp_size: int, tp_rank: int, ep_size: int, ep_rank: int):
    """One rank's (w13, w2, b13, b2) from full-model weights; use with spec_full.with_parallel(...).  A TP
    rank's slice ends in zero columns where the split pads the intermediate size (ModelSpec.tp_slice)."""
    E, I, H = spec_full.num_experts, spec_full.intermediate_size, spec_full.hidden_size
    spec = spec_full.with_parallel(tp_size=tp_size, ep_size=ep_size, ep_rank=ep_rank)  # validates the split
    c0, c1 = spec.tp_slice(tp_rank)
    pad = spec.local_intermediate - (c1 - c0)
    _check_shape("w13", w13, (E, 2 * I, H))
    _check_shape("w2", w2, (E, H, I))
    _check_optional("b13", b13, spec_full.gemm1_bias, (E, 2 * I), "gemm1 bias")
    _check_optional("b2", b2, spec_full.gemm2_bias, (E, H), "gemm2 bias")

    experts = slice(ep_rank * E // ep_size, (ep_rank + 1) * E // ep_size)

    def columns(t: Tensor, dim: int, offset: int) -> Tensor:  # columns c0:c1 (+ offset) of dim, zero-padded
        part = t[experts].narrow(dim, offset + c0, c1 - c0)
        return torch.cat((part, part.new_zeros(*part.shape[:dim], pad, *part.shape[dim + 1:])), dim)

    w13_rank = torch.cat((columns(w13, 1, 0), columns(w13, 1, I)), 1).contiguous()  # gate columns, then up
    w2_rank = columns(w2, 2, 0).contiguous()
    b13_rank = None if b13 is None else torch.cat((columns(b13, 1, 0), columns(b13, 1, I)), 1).contiguous()
    b2_rank = None
    if b2 is not None:  # added once across TP ranks: whole on rank 0, zero elsewhere
        b2_rank = b2[experts].clone() if tp_rank == 0 else torch.zeros_like(b2[experts])
    return w13_rank, w2_rank, b13_rank, b2_rank
