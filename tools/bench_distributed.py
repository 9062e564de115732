"""EP on N GPUs against one GPU, per T: CUDA-graph-free medians (the all-to-all mode syncs the host),
both exchange modes, and the share of time in communication (the same exchanges with the experts
replaced by a copy).  Launch with torchrun; rank 0 prints a markdown table and writes JSON.

    torchrun --nproc-per-node 2 tools/bench_distributed.py qwen3-30b-a3b 1,16,256,1024,4096,16384 out.json [OUT]

Each rank needs its build under OUT (default: moegen's, generated/): moegen build --model M --arch sm90
--ep-size N --ep-rank R (and the unsplit one on rank 0 for the single-GPU column).
"""
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from moegen.paths import DEFAULT_OUT
from moegen.distributed import DistributedMoe, make_groups, rank_spec
from moegen.prepare import prepare
from moegen.runtime import load
from moegen.spec import load_model
from moegen.testing import random_inputs, random_weights

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def median_ms(fn, reps=20, collective=True):
    """collective: fn runs on every rank, which start each repetition together (a barrier); a
    one-rank timing must not call it, or the ranks' collectives pair up out of order and hang."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if collective:
            dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    model, tokens, out = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], sys.argv[3]
    root = Path(sys.argv[4]) if len(sys.argv) > 4 else DEFAULT_OUT
    local = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # torchrun's, right on every node
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=local)
    rank, world = dist.get_rank(), dist.get_world_size()
    full = load_model(model)
    groups = make_groups(world, 1)
    spec = rank_spec(full, groups)
    layer = load(root / spec.variant / "sm90", spec=spec)
    w = random_weights(full, "cuda", 0)
    e0, e1 = spec.expert_begin, spec.expert_begin + spec.local_experts
    mine = prepare(spec, w.w13[e0:e1].contiguous(), w.s13[e0:e1].contiguous(), w.w2[e0:e1].contiguous(),
                   w.s2[e0:e1].contiguous(), None if w.b13 is None else w.b13[e0:e1].contiguous(),
                   None if w.b2 is None else w.b2[e0:e1].contiguous())
    moe = DistributedMoe(spec, lambda h, i, wt: layer.experts(h, i, wt, mine), groups)
    comm_only = DistributedMoe(spec, lambda h, i, wt: h.to(torch.bfloat16).new_zeros(h.shape), groups)
    single = load(root / full.variant / "sm90", spec=full) if rank == 0 else None
    rows = []
    for T in tokens:
        x = random_inputs(full, T, "cuda", 10 + rank)
        ids = torch.topk(x.logits, full.top_k, dim=1).indices
        wts = torch.softmax(x.logits.gather(1, ids), dim=1)
        row = {"T": T}
        for mode in ("allgather", "alltoall"):
            row[mode] = median_ms(lambda: moe(x.hidden, ids, wts, mode=mode)) * 1e3
            row[f"{mode}_comm"] = median_ms(lambda: comm_only(x.hidden, ids, wts, mode=mode)) * 1e3
        if single is not None:  # one GPU with every expert, the same T (per rank) of tokens
            row["single"] = median_ms(lambda: single.experts(x.hidden, ids, wts, w.prepared), collective=False) * 1e3
        rows.append(row)
        dist.barrier()  # every rank's next T starts after rank 0's one-GPU column
    if rank == 0:
        print(f"| T per rank | 1 GPU µs | EP{world} all-gather µs (comm %) | EP{world} all-to-all µs (comm %) |")
        print("|---|---|---|---|")
        for r in rows:
            print(f"| {r['T']} | {r['single']:.1f} | {r['allgather']:.1f} ({100 * r['allgather_comm'] / r['allgather']:.0f} %) "
                  f"| {r['alltoall']:.1f} ({100 * r['alltoall_comm'] / r['alltoall']:.0f} %) |")
        with open(out, "w") as f:
            json.dump(dict(model=model, world=world, rows=rows), f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
