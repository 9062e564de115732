"""moegen.distributed's communication on CPU processes (gloo), with the float64 reference as each
rank's experts: EP 2, TP 2 and EP 2 x TP 2, both exchange modes, against one process's whole layer.
The same code on GPUs (NCCL, MoeLayer.experts) is tests/test_distributed_gpu.py (marker gpu2)."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from moegen import reference
from moegen.distributed import DistributedMoe, make_groups, rank_spec
from moegen.spec import model_from_dict

SPEC = model_from_dict({"name": "tiny", "num_experts": 8, "hidden_size": 64, "intermediate_size": 64,
                        "router": {"kind": "topk_softmax", "top_k": 2},
                        "activation": {"kind": "swiglu_oai", "alpha": 1.702, "limit": 7.0},
                        "bias": {"gemm1": True, "gemm2": True}})
CASES = ("random", "other_rank", "empty_rank", "one", "zero", "invalid_ids")


def _weights(seed=5):
    g = torch.Generator().manual_seed(seed)
    E, H, I = SPEC.num_experts, SPEC.hidden_size, SPEC.intermediate_size
    return (torch.randn(E, 2 * I, H, generator=g, dtype=torch.float64) * 0.1,
            torch.randn(E, H, I, generator=g, dtype=torch.float64) * 0.1,
            torch.randn(E, 2 * I, generator=g, dtype=torch.float64) * 0.1,
            torch.randn(E, H, generator=g, dtype=torch.float64) * 0.1)


def _tokens(case, rank, ep_size, seed):
    """This rank's tokens, ids and weights for a case (the same on every call)."""
    g = torch.Generator().manual_seed(seed + 101 * rank)
    T = {"random": 13, "other_rank": 5, "empty_rank": 0 if rank == 0 else 7, "one": 1, "zero": 0, "invalid_ids": 9}[case]
    hidden = torch.randn(T, SPEC.hidden_size, generator=g, dtype=torch.float64)
    ids = torch.stack([torch.randperm(SPEC.num_experts, generator=g)[:SPEC.top_k] for _ in range(T)]) if T else \
        torch.empty((0, SPEC.top_k), dtype=torch.int64)
    if case == "other_rank":  # every expert of this rank's tokens lives on the next EP rank
        local = SPEC.num_experts // ep_size
        other = (rank + 1) % ep_size if ep_size > 1 else 0
        ids = other * local + torch.stack([torch.randperm(local, generator=g)[:SPEC.top_k] for _ in range(T)])
    if case == "invalid_ids":  # slots an engine masks (-1) or fills past the experts: they add nothing
        ids[0::2, 0] = -1
        ids[1::3, -1] = SPEC.num_experts
    weights = torch.rand((T, SPEC.top_k), generator=g, dtype=torch.float64)
    return hidden, ids, weights


def _masked_moe(spec, hidden, ids, weights, *w):
    """The float64 reference under MoeLayer.experts' contract: a slot whose id names no expert adds nothing."""
    valid = (ids >= 0) & (ids < spec.num_experts)
    return reference.moe(spec, hidden, torch.where(valid, ids, 0), torch.where(valid, weights, 0), *w)


def _rank(rank, world, ep_size, tp_size, port, results, run):
    """One gloo process: its groups, its split spec and weights, then run(...) records its outputs."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        groups = make_groups(ep_size, tp_size)
        spec = rank_spec(SPEC, groups)
        w = reference.shard_weights(SPEC, *_weights(), tp_size, groups.tp_rank, ep_size, groups.ep_rank)
        run(rank, groups, spec, w, results)
    finally:
        dist.destroy_process_group()


def _spawn(run, ep_size, tp_size) -> dict:
    world = ep_size * tp_size
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_rank, args=(world, ep_size, tp_size, _free_port(), results, run), nprocs=world)
        return dict(results)


def _every_case(rank, groups, spec, w, results):
    layer = DistributedMoe(spec, lambda h, ids, wt: _masked_moe(spec, h, ids, wt, *w), groups)
    for case in CASES:
        for mode in ("allgather", "alltoall"):
            hidden, ids, weights = _tokens(case, groups.ep_rank, groups.ep_size, seed=11)
            # all-gather takes one length on every rank: ranks with other T pad to a bound they share
            pad_to = 9 if case in ("empty_rank", "one") and mode == "allgather" else None
            results[(rank, case, mode)] = layer(hidden, ids, weights, mode=mode, pad_to=pad_to)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("ep_size, tp_size", [(2, 1), (1, 2), (2, 2)])
def test_split_layer_equals_the_whole_layer(ep_size, tp_size):
    world = ep_size * tp_size
    results = _spawn(_every_case, ep_size, tp_size)
    w13, w2, b13, b2 = _weights()
    assert len(results) == world * 2 * len(CASES)
    for (rank, case, mode), out in results.items():
        ep_rank = rank // tp_size
        hidden, ids, weights = _tokens(case, ep_rank, ep_size, seed=11)
        want = _masked_moe(SPEC, hidden, ids, weights, w13, w2, b13, b2)
        assert out.shape == want.shape, (rank, case, mode)
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12, msg=f"rank {rank} {case} {mode}")


def _bf16_case(rank, groups, spec, w, results):
    """The layer's dtypes: bf16 hidden states and outputs of each rank's experts, int32 ids, fp32 weights."""
    layer = DistributedMoe(spec, lambda h, i, wt: _masked_moe(spec, h, i, wt, *w).to(torch.bfloat16), groups)
    hidden, ids, weights = _tokens("random", groups.ep_rank, groups.ep_size, seed=23)
    for mode in ("allgather", "alltoall"):
        results[(rank, mode)] = layer(hidden.to(torch.bfloat16), ids.to(torch.int32), weights.float(), mode=mode)


@pytest.mark.parametrize("ep_size, tp_size", [(2, 1), (1, 2), (2, 2)])
def test_partial_sums_cross_ranks_in_fp32_and_round_once(ep_size, tp_size):
    """Each rank's bf16 partials are added in fp32 (EP ranks, then TP ranks) and rounded to bf16 once:
    the same bits as that sum taken here, in either mode."""
    results = _spawn(_bf16_case, ep_size, tp_size)
    assert len(results) == 2 * ep_size * tp_size
    full = _weights()
    for (rank, mode), out in results.items():
        hidden, ids, weights = _tokens("random", rank // tp_size, ep_size, seed=23)
        x, ids, weights = hidden.to(torch.bfloat16).double(), ids.to(torch.int32), weights.float().double()
        per_tp = []
        for t in range(tp_size):
            total = None
            for e in range(ep_size):
                spec = SPEC.with_parallel(tp_size=tp_size, ep_size=ep_size, ep_rank=e)
                w = reference.shard_weights(SPEC, *full, tp_size, t, ep_size, e)
                part = _masked_moe(spec, x, ids, weights, *w).to(torch.bfloat16).float()
                total = part if total is None else total + part
            per_tp.append(total)
        want = per_tp[0] if tp_size == 1 else per_tp[0] + per_tp[1]
        assert out.dtype == torch.bfloat16, (rank, mode)
        assert torch.equal(out, want.to(torch.bfloat16)), f"rank {rank} {mode}"


def test_rank_spec_and_bad_modes():
    class FakeGroups:
        ep_size, tp_size, ep_rank, tp_rank, ep, tp = 2, 1, 1, 0, None, None

    spec = rank_spec(SPEC, FakeGroups)
    assert spec.variant == "tiny-ep1of2"
    with pytest.raises(ValueError, match="mode 'nccl': expected one of"):
        DistributedMoe(spec, lambda *a: None, FakeGroups, mode="nccl")
    with pytest.raises(ValueError, match="mode .auto.: expected one of allgather, alltoall"):
        DistributedMoe(spec, lambda *a: None, FakeGroups, mode="auto")  # ranks would choose apart
    with pytest.raises(ValueError, match="is not this rank's"):
        DistributedMoe(SPEC, lambda *a: None, FakeGroups)
    layer, x = DistributedMoe(spec, lambda *a: None, FakeGroups), torch.zeros(5, SPEC.hidden_size)
    ids, weights = torch.zeros(5, SPEC.top_k, dtype=torch.int32), torch.ones(5, SPEC.top_k)
    for bad in (4, -1, 5.0, True):  # checked before any collective
        with pytest.raises(ValueError, match=rf"pad_to = {bad!r}: expected an integer >= this rank's 5 tokens"):
            layer(x, ids, weights, pad_to=bad)
    # routing that does not match the tokens would leave some tokens' output zero: refused up front
    with pytest.raises(ValueError, match=rf"topk_ids: \[4, {SPEC.top_k}\] int32 on cpu, expected \[5, {SPEC.top_k}\]"):
        layer(x, ids[:4], weights)
    with pytest.raises(ValueError, match="topk_ids: .* float32 on cpu, expected .* int32 or int64"):
        layer(x, ids.float(), weights)
    with pytest.raises(ValueError, match="topk_weights: list, expected"):
        layer(x, ids, weights.tolist())
    with pytest.raises(ValueError, match=rf"hidden: \[5, 3\] float32 on cpu, expected a \[T, {SPEC.hidden_size}\]"):
        layer(x[:, :3], ids, weights)


@pytest.mark.parametrize("T", [0, 1, 5])
def test_a_tokens_rows_cross_as_one_row_of_bytes(T):
    """The packing that lets one collective carry a token's ids and weights: parts of any types side by
    side (here bf16 first, so that the int32 part starts at byte 14, not a multiple of 4), back bit for bit, each
    part contiguous (the experts' C ABI takes dense rows)."""
    from moegen.distributed import _pack_rows, _unpack_rows
    g = torch.Generator().manual_seed(T)
    hidden = torch.randn(T, 7, generator=g).to(torch.bfloat16)
    ids = torch.randint(-1, 300, (T, 3), generator=g, dtype=torch.int32)
    weights = torch.rand(T, 3, generator=g)
    rows = _pack_rows(hidden, ids[:, [2, 0, 1]][:, [1, 2, 0]], weights)  # a non-contiguous part too
    assert rows.dtype == torch.uint8 and rows.shape == (T, 7 * 2 + 3 * 4 + 3 * 4)
    parts = _unpack_rows(rows.clone(), hidden, ids, weights)
    for got, want in zip(parts, (hidden, ids, weights)):
        assert got.dtype == want.dtype and got.is_contiguous() and torch.equal(got, want)
