"""Routing in PyTorch for the layers the fused kernel does not route: DeepSeek-V4's hash layers
(the first `router.hash_layers` MoE layers take their experts from a token-id table).  Feed the
result to MoeLayer.experts."""
from __future__ import annotations

import torch

from .spec import ModelSpec


def hash_route(spec: ModelSpec, router_logits: torch.Tensor, tid2eid: torch.Tensor,
               input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V4 hash routing: ids = tid2eid[input_ids]; weights = the router's scores
    (sqrt(softplus(logits)), float32) of those experts, renormalized, times routed_scaling_factor.
    Returns (int32 [T, top_k] global ids, float32 [T, top_k] weights)."""
    r = spec.router
    if r.kind != "sqrtsoftplus_topk":
        raise ValueError(f"{spec.name}: router kind {r.kind!r}, expected 'sqrtsoftplus_topk' (hash routing is "
                         "DeepSeek-V4's)")
    T = input_ids.shape[0] if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 1 else None
    if T is None or input_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"input_ids: expected a 1-D int32/int64 tensor of token ids, got "
                         f"{tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__}")
    if not isinstance(tid2eid, torch.Tensor) or tid2eid.dim() != 2 or tid2eid.shape[1] != r.top_k \
            or tid2eid.shape[0] == 0 or tid2eid.dtype not in (torch.int16, torch.int32, torch.int64):
        got = f"{tid2eid.dtype} {tuple(tid2eid.shape)}" if isinstance(tid2eid, torch.Tensor) else type(tid2eid).__name__
        raise ValueError(f"tid2eid: {got}, expected a [vocab, {r.top_k}] integer tensor")
    if not isinstance(router_logits, torch.Tensor) or tuple(router_logits.shape) != (T, spec.num_experts):
        raise ValueError(f"router_logits: expected shape ({T}, {spec.num_experts})")
    for name, t in (("tid2eid", tid2eid), ("router_logits", router_logits)):
        if t.device != input_ids.device:
            raise ValueError(f"{name}: on {t.device}, expected {input_ids.device} (the device of input_ids)")
    # Out-of-range token ids and table entries become -1 slots (no expert; MoeLayer.experts adds nothing
    # for them) by masks on the device: an index check would cost a host sync, an unchecked gather a
    # device-side fault that ends the CUDA context.
    vocab = tid2eid.shape[0]
    token_ok = (input_ids >= 0) & (input_ids < vocab)
    ids = tid2eid[input_ids.long().clamp(0, vocab - 1)].long()
    valid = token_ok[:, None] & (ids >= 0) & (ids < spec.num_experts)
    ids = torch.where(valid, ids, torch.full_like(ids, -1))
    logits = router_logits.float()
    scores = torch.sqrt(logits.clamp(min=0) + torch.log1p(torch.exp(-logits.abs())))
    weights = torch.where(valid, scores.gather(1, ids.clamp(min=0)), torch.zeros((), device=scores.device))
    if r.renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny)
    return ids.to(torch.int32), (weights * r.routed_scaling_factor).contiguous()
