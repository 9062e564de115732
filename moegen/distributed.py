"""An MoE layer split over GPUs with torch.distributed (NCCL): expert parallelism (EP), tensor
parallelism (TP), or both.  Written for any number of ranks; launch with torchrun.

World rank r is EP rank r // tp_size and TP rank r % tp_size.  Each rank holds its experts (the
contiguous range of the `--ep-size` build) and its intermediate slice (the `--tp` build), and its own
tokens with their routing (global top-k ids and weights: route with moegen.routing or your engine).
Tokens reach the ranks that own their experts, and the results come back:

* ``allgather``: all-gather every EP rank's tokens, run this rank's experts on all of them (slots of
  other ranks' experts add zero), reduce-scatter the partial sums back.  The collectives need one
  length on every rank: pass the same T, or ``pad_to`` (a bound every rank agrees on, e.g. the CUDA
  graph's batch size), to which each rank pads its tokens with slots that name no expert.  No host
  synchronization, static shapes: CUDA-graph capturable.
* ``alltoall``: send each token only to the ranks that own one of its experts
  (``all_to_all_single``), run the experts there, send the partial sums back and add them per token
  in rank order.  Fewer bytes at large T; the split sizes cost one host sync.
* TP: the TP ranks of an EP rank hold the same tokens and sum their partial outputs (all-reduce).

Each rank's partial output is what its experts return (bf16 from MoeLayer.experts); the partials
cross ranks in fp32 and the sum is rounded to the input's dtype at the end.  All-to-all
adds them in rank order at any T; all-gather's reduce-scatter and TP's all-reduce add in NCCL's
order, which with three or more ranks may depend on the message size (so on T): with two ranks every
mode gives the same bits.  An id outside [0, num_experts) adds nothing in either mode, as in
MoeLayer.experts.

The experts are any callable ``experts(hidden, topk_ids, topk_weights) -> out`` that computes this
rank's share (MoeLayer.experts with the rank's prepared weights; the float64 reference in tests).
Under TP, GEMM2's bias must be whole on TP rank 0 and zero on the others, or it is added tp_size
times (moegen.checkpoint.load_experts prepares it so).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from .spec import ModelSpec

Experts = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# All-gather moves ep_size x the tokens to every rank whatever their routing; all-to-all moves each
# token only to the ranks of its experts (at most min(top_k, ep_size) of them) but costs a host sync.
# The caller picks: the crossover has not been measured on a multi-GPU machine, and a per-rank
# choice from each rank's own T would let ranks call different collectives and hang.
MODES = ("allgather", "alltoall")


@dataclass(frozen=True)
class Groups:
    ep: object  # process group of this rank's EP peers (same TP rank)
    tp: object  # process group of this rank's TP peers (same EP rank)
    ep_rank: int
    tp_rank: int
    ep_size: int
    tp_size: int


def make_groups(ep_size: int, tp_size: int) -> Groups:
    """Every rank must call this (torch.distributed.new_group is collective)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if ep_size * tp_size != world:
        raise ValueError(f"ep_size {ep_size} x tp_size {tp_size} = {ep_size * tp_size}, expected the world size {world}")
    ep_groups = [dist.new_group([e * tp_size + t for e in range(ep_size)]) for t in range(tp_size)]
    tp_groups = [dist.new_group([e * tp_size + t for t in range(tp_size)]) for e in range(ep_size)]
    ep_rank, tp_rank = divmod(rank, tp_size)
    return Groups(ep_groups[tp_rank], tp_groups[ep_rank], ep_rank, tp_rank, ep_size, tp_size)


def rank_spec(spec: ModelSpec, groups: Groups) -> ModelSpec:
    """The spec of this rank's build (`moegen build --tp T --ep-size E --ep-rank R`)."""
    return spec.with_parallel(tp_size=groups.tp_size, ep_size=groups.ep_size, ep_rank=groups.ep_rank)


def _acc(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


# A token's ids and weights travel as one row of bytes, so each exchange is two collectives, not three
# (each a launch and a latency of its own, which at decode cost more than the bytes).  The hidden rows go
# straight into their own buffer: packed beside them they would be copied twice more on the way.
def _pack_rows(*parts: torch.Tensor) -> torch.Tensor:
    """[T, bytes of one row of every part]: the parts' rows side by side as uint8 (each part [T, n])."""
    return torch.cat([p.contiguous().view(torch.uint8) for p in parts], dim=1)


def _unpack_rows(rows: torch.Tensor, *likes: torch.Tensor) -> list[torch.Tensor]:
    """The parts of _pack_rows(rows of tensors shaped and typed as `likes`), each contiguous."""
    parts, start = [], 0
    for like in likes:
        width = like.shape[1] * like.element_size()
        # a copy of its own: a slice's byte offset need not be a multiple of the part's element size
        parts.append(rows[:, start:start + width].clone(memory_format=torch.contiguous_format).view(like.dtype))
        start += width
    return parts


def _padded(length: int | None, hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor):
    """The tokens padded to `length` rows (None: as they are) with rows that add nothing: id -1, weight 0."""
    T = hidden.shape[0]
    if length is None or length == T:
        return hidden, ids, weights
    pad = length - T
    return (torch.cat((hidden, hidden.new_zeros((pad, hidden.shape[1])))),
            torch.cat((ids, ids.new_full((pad, ids.shape[1]), -1))),
            torch.cat((weights, weights.new_zeros((pad, weights.shape[1])))))


def _described(t) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')} on {t.device}"


class DistributedMoe:
    def __init__(self, spec: ModelSpec, experts: Experts, groups: Groups, mode: str = "allgather"):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
        if spec.parallel.ep_size != groups.ep_size or spec.parallel.tp_size != groups.tp_size or \
                spec.parallel.ep_rank != groups.ep_rank:
            raise ValueError(f"spec {spec.variant}: its split (tp {spec.parallel.tp_size}, ep {spec.parallel.ep_size} "
                             f"rank {spec.parallel.ep_rank}) is not this rank's (tp {groups.tp_size}, ep "
                             f"{groups.ep_size} rank {groups.ep_rank}); use moegen.distributed.rank_spec")
        self.spec, self.experts, self.groups, self.mode = spec, experts, groups, mode

    def __call__(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                 mode: str | None = None, pad_to: int | None = None) -> torch.Tensor:
        """This rank's tokens' layer output (bf16 [T, H]).  `alltoall` takes any T per rank, 0 included
        (and needs no pad_to).  `allgather` needs one length on every EP rank: the same T, or the same
        `pad_to` >= T on each (the ranks cannot check it without a host sync: lengths that differ make
        NCCL hang or misread).  `alltoall` sends a token to the ranks that own its experts by the
        contiguous ranges of `--ep-size E --ep-rank R` builds (global id // local experts); experts
        placed otherwise (an expert_map inside `experts`) need `allgather`, which sends every token to
        every rank."""
        mode = mode or self.mode
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
        if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2 or hidden.shape[1] != self.spec.hidden_size:
            raise ValueError(f"hidden: {_described(hidden)}, expected a [T, {self.spec.hidden_size}] tensor")
        T, k = hidden.shape[0], self.spec.top_k
        # host-side checks only (no sync): fewer id rows than tokens would leave the last tokens' output zero
        for name, t, kind, ok in (("topk_ids", topk_ids, "int32 or int64", lambda t: t.dtype in (torch.int32, torch.int64)),
                                  ("topk_weights", topk_weights, "float", lambda t: t.is_floating_point())):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != (T, k) or not ok(t) or t.device != hidden.device:
                raise ValueError(f"{name}: {_described(t)}, expected [{T}, {k}] {kind} on {hidden.device}")
        if pad_to is not None and (isinstance(pad_to, bool) or not isinstance(pad_to, int) or pad_to < T):
            raise ValueError(f"pad_to = {pad_to!r}: expected an integer >= this rank's {T} tokens")
        if mode == "allgather":
            out = self._allgather(*_padded(pad_to, hidden, topk_ids, topk_weights))[:T]
        else:
            out = self._alltoall(hidden, topk_ids, topk_weights)
        if self.groups.tp_size > 1:  # the TP ranks' partial sums over their intermediate slices
            dist.all_reduce(out, group=self.groups.tp)
        return out.to(hidden.dtype)

    # --- all-gather + reduce-scatter ---------------------------------------------------------------

    # Both return partial sums in fp32 (or the input's wider type): the reductions across ranks add in
    # fp32, as one GPU's finalize does.

    def _allgather(self, hidden, ids, weights):
        g = self.groups
        if g.ep_size == 1:
            return self.experts(hidden, ids, weights).to(_acc(hidden))
        T = hidden.shape[0]
        all_hidden = hidden.new_empty((g.ep_size * T, hidden.shape[1]))
        dist.all_gather_into_tensor(all_hidden, hidden.contiguous(), group=g.ep)
        routes = _pack_rows(ids, weights)
        all_routes = routes.new_empty((g.ep_size * T, routes.shape[1]))
        dist.all_gather_into_tensor(all_routes, routes, group=g.ep)
        partial = self.experts(all_hidden, *_unpack_rows(all_routes, ids, weights)).to(_acc(hidden))
        out = partial.new_empty((T, hidden.shape[1]))
        dist.reduce_scatter_tensor(out, partial, group=g.ep)
        return out

    # --- all-to-all ---------------------------------------------------------------------------------

    def _alltoall(self, hidden, ids, weights):
        g, spec = self.groups, self.spec
        if g.ep_size == 1:
            return self.experts(hidden, ids, weights).to(_acc(hidden))
        T, H = hidden.shape
        dev = hidden.device
        slot = ids.long()
        # EP rank of each slot's expert (contiguous ranges); a slot whose id names no expert goes nowhere
        owner = torch.where((slot >= 0) & (slot < spec.num_experts), slot // spec.local_experts, g.ep_size)
        to_rank = torch.zeros((T, g.ep_size + 1), dtype=torch.bool, device=dev)
        to_rank.scatter_(1, owner, True)
        to_rank = to_rank[:, :g.ep_size]
        send_counts = to_rank.sum(0)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=g.ep)
        counts = torch.cat((send_counts, recv_counts)).tolist()  # the one host sync
        send, recv = counts[:g.ep_size], counts[g.ep_size:]
        # (rank, token) pairs in rank order: one copy of a token per rank that owns any of its experts
        token = torch.nonzero_static(to_rank.t(), size=sum(send))[:, 1]
        n_in = sum(recv)
        in_hidden = hidden.new_empty((n_in, H))
        dist.all_to_all_single(in_hidden, hidden[token].contiguous(), recv, send, group=g.ep)
        routes = _pack_rows(ids[token], weights[token])
        in_routes = routes.new_empty((n_in, routes.shape[1]))
        dist.all_to_all_single(in_routes, routes, recv, send, group=g.ep)
        partial = self.experts(in_hidden, *_unpack_rows(in_routes, ids, weights)).to(_acc(hidden))
        back = partial.new_empty((len(token), H))
        dist.all_to_all_single(back, partial.contiguous(), send, recv, group=g.ep)
        # Each token's partials added in rank order (deterministic): `back` is in send order, rank by rank,
        # and a token appears at most once per rank, so each index_add_ adds one term per output row.
        out = back.new_zeros((T, H))
        start = 0
        for count in send:
            out.index_add_(0, token[start:start + count], back[start:start + count])
            start += count
        return out
