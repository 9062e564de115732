"""EP 2 and TP 2 on two GPUs (NCCL) against the single-GPU layer on the same weights and inputs
(marker gpu2; skipped without two SM90 GPUs).  Each rank runs MoeLayer.experts of its own build.

Tolerance: each rank's partial output is rounded to bf16 by its own layer before the fp32 sum across
ranks, where one GPU rounds once; with 2 ranks the difference is at most one bf16
rounding of each partial (relative 2^-8), so the split and the single-GPU outputs agree to a relative
L2 of ~4e-3, and both stay within the 1e-2 the single-GPU tests hold against float64.
"""
import os
import socket

import pytest
import torch

pytestmark = pytest.mark.gpu2

if torch.cuda.device_count() < 2 or any(torch.cuda.get_device_capability(d) != (9, 0) for d in range(2)):
    pytest.skip("needs two SM90 GPUs", allow_module_level=True)

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from gpu_variants import OUT, STORE  # noqa: E402
from moegen.build import build  # noqa: E402
from moegen.kernel_sets import default_kernels  # noqa: E402
from moegen.distributed import DistributedMoe, make_groups, rank_spec  # noqa: E402
from moegen.prepare import prepare  # noqa: E402
from moegen.runtime import load  # noqa: E402
from moegen.spec import load_model  # noqa: E402
from moegen.testing import random_inputs, random_weights, relative_l2  # noqa: E402

MODEL = "qwen3-30b-a3b"
SEED = int(os.environ["MOEGEN_TEST_SEED"])  # tests/conftest.py draws it and prints it in the header
TOLERANCE = 1e-2
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on shared machines


def _build_all(ep_size, tp_size):
    """Every rank's library and the whole layer's, built here before the ranks start (a rank waiting in
    a collective while another compiles could pass NCCL's timeout): the kernels `moegen build` gives
    each split, since the unsplit model's tiles need not fit a split's shapes."""
    full = load_model(MODEL)
    specs = {full.with_parallel(tp_size=tp_size, ep_size=ep_size, ep_rank=e) for e in range(ep_size)} | {full}
    for spec in specs:
        build(spec, "sm90", default_kernels(spec, "sm90"), OUT, log=lambda m: None, store=STORE)


def _load(spec):
    return load(OUT / spec.variant / "sm90", spec=spec)


def _rank_weights(full, spec, w, groups):
    """This rank's prepared experts from the full model's raw MXFP4 weights (EP range, TP columns, zero
    past the intermediate size where the split pads it)."""
    e0, e1 = spec.expert_begin, spec.expert_begin + spec.local_experts
    I, Il = full.intermediate_size, spec.local_intermediate
    c0, c1 = spec.tp_slice(groups.tp_rank)

    def padded(t, dim, n):
        return torch.cat((t, t.new_zeros(*t.shape[:dim], n - t.shape[dim], *t.shape[dim + 1:])), dim)

    def gate_up(t):
        return torch.cat((padded(t[e0:e1, c0:c1], 1, Il), padded(t[e0:e1, I + c0:I + c1], 1, Il)), 1).contiguous()

    w2 = padded(w.w2[e0:e1, :, c0 // 2:c1 // 2], 2, Il // 2).contiguous()
    s2 = padded(w.s2[e0:e1, :, c0 // 32:c1 // 32], 2, Il // 32).contiguous()
    return prepare(spec, gate_up(w.w13), gate_up(w.s13), w2, s2)


def _worker(rank, world, ep_size, tp_size, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        full = load_model(MODEL)
        groups = make_groups(ep_size, tp_size)
        spec = rank_spec(full, groups)
        layer = _load(spec)
        w = random_weights(full, "cuda", SEED)  # the whole model's raw weights, the same on every rank
        mine = _rank_weights(full, spec, w, groups)
        moe = DistributedMoe(spec, lambda h, i, wt: layer.experts(h, i, wt, mine), groups)
        single = _load(full) if rank == 0 else None
        # "uneven": the EP ranks hold 3 and 11 tokens; all-gather pads both to 16 (pad_to)
        for case, T in (("zero", 0), ("one", 1), ("decode", 16), ("other_rank", 64), ("prefill", 4096),
                        ("uneven", 3 + 8 * groups.ep_rank)):
            x = random_inputs(full, T, "cuda", SEED + T + 1000 * groups.ep_rank, skew=case == "other_rank")
            ids = torch.topk(x.logits, full.top_k, dim=1).indices
            if case == "other_rank":  # every token of this rank on the other EP rank's experts
                ids = (ids % spec.local_experts) + ((groups.ep_rank + 1) % ep_size) * spec.local_experts
            weights = torch.softmax(x.logits.gather(1, ids), dim=1)  # from the seeded inputs: equal on TP peers
            for mode in ("allgather", "alltoall"):
                pad_to = 16 if case == "uneven" and mode == "allgather" else None
                results[(rank, case, mode)] = moe(x.hidden, ids, weights, mode=mode, pad_to=pad_to).cpu()
            results[(rank, case, "input")] = (x.hidden.cpu(), ids.cpu(), weights.cpu())
        # CUDA-graph capture of the all-gather exchange
        x = random_inputs(full, 32, "cuda", SEED + 7 + groups.ep_rank)
        ids = torch.topk(x.logits, full.top_k, dim=1).indices
        weights = torch.softmax(x.logits.gather(1, ids), dim=1)
        eager = moe(x.hidden, ids, weights, mode="allgather")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = moe(x.hidden, ids, weights, mode="allgather")
        graph.replay()
        torch.cuda.synchronize()
        results[(rank, "graph", "equal")] = bool(torch.equal(captured, eager))
        dist.barrier()
        if single is not None:  # rank 0 computes every rank's tokens on the whole layer, one GPU
            w_full = w.prepared
            for key, value in list(results.items()):
                if key[2] == "input":
                    h, i, wt = (t.cuda() for t in value)
                    results[(key[0], key[1], "single")] = single.experts(h, i, wt, w_full).cpu()
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("ep_size, tp_size", [(2, 1), (1, 2)])
def test_two_gpus_equal_one(ep_size, tp_size):
    print(f"seed {SEED}")
    _build_all(ep_size, tp_size)
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(2, ep_size, tp_size, _free_port(), results), nprocs=2)
        results = dict(results)
    compared = 0
    for (rank, case, mode), out in results.items():
        if mode in ("allgather", "alltoall"):
            single = results[(rank, case, "single")]
            assert out.shape == single.shape and out.dtype == torch.bfloat16, (rank, case, mode)
            if out.numel() == 0:
                continue
            err = relative_l2(out, single)
            print(f"ep{ep_size} tp{tp_size} rank {rank} {case} {mode}: rel L2 vs one GPU {err:.2e}")
            assert err <= TOLERANCE
            compared += 1
    assert compared == 2 * 5 * 2  # ranks x cases with tokens x modes
    graphs = [v for (r, c, m), v in results.items() if c == "graph"]
    assert len(graphs) == 2 and all(graphs)
