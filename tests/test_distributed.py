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
CASES = ("random", "other_rank", "empty_rank", "one", "zero")


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
    T = {"random": 13, "other_rank": 5, "empty_rank": 0 if rank == 0 else 7, "one": 1, "zero": 0}[case]
    hidden = torch.randn(T, SPEC.hidden_size, generator=g, dtype=torch.float64)
    ids = torch.stack([torch.randperm(SPEC.num_experts, generator=g)[:SPEC.top_k] for _ in range(T)]) if T else \
        torch.empty((0, SPEC.top_k), dtype=torch.int64)
    if case == "other_rank":  # every expert of this rank's tokens lives on the next EP rank
        local = SPEC.num_experts // ep_size
        other = (rank // 1 + 1) % ep_size if ep_size > 1 else 0
        ids = other * local + torch.stack([torch.randperm(local, generator=g)[:SPEC.top_k] for _ in range(T)])
    weights = torch.rand((T, SPEC.top_k), generator=g, dtype=torch.float64)
    return hidden, ids, weights


def _worker(rank, world, ep_size, tp_size, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        groups = make_groups(ep_size, tp_size)
        spec = rank_spec(SPEC, groups)
        w13, w2, b13, b2 = reference.shard_weights(SPEC, *_weights(), tp_size, groups.tp_rank, ep_size, groups.ep_rank)

        def experts(h, ids, w):
            return reference.moe(spec, h, ids, w, w13, w2, b13, b2)

        layer = DistributedMoe(spec, experts, groups)
        for case in CASES:
            for mode in ("allgather", "alltoall"):
                if case == "empty_rank" and mode == "allgather":
                    continue  # all-gather takes one T on every rank (pad)
                hidden, ids, weights = _tokens(case, groups.ep_rank, ep_size, seed=11)
                results[(rank, case, mode)] = layer(hidden, ids, weights, mode=mode)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("ep_size, tp_size", [(2, 1), (1, 2), (2, 2)])
def test_split_layer_equals_the_whole_layer(ep_size, tp_size):
    world = ep_size * tp_size
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(world, ep_size, tp_size, _free_port(), results), nprocs=world)
        results = dict(results)
    w13, w2, b13, b2 = _weights()
    for (rank, case, mode), out in results.items():
        ep_rank = rank // tp_size
        hidden, ids, weights = _tokens(case, ep_rank, ep_size, seed=11)
        want = reference.moe(SPEC, hidden, ids, weights, w13, w2, b13, b2)
        assert out.shape == want.shape, (rank, case, mode)
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12, msg=f"rank {rank} {case} {mode}")


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
