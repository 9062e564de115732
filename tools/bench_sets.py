"""The benchmark's input sets one by one: why `moegen bench`'s p10 and p90 lie apart.

For each T, the same 8 input sets as `moegen bench` (same seeds): experts hit, the largest expert's
rows, GEMM1 work tiles at the picked kernel's block_n, and the median of that set's graph replays.

    python3 tools/bench_sets.py deepseek-v4-flash 1024,4096 [build-dir]
"""
import statistics
import sys
from pathlib import Path

import torch

from moegen.bench import replay_times_us
from moegen.cli import DEFAULT_OUT
from moegen.runtime import load
from moegen.spec import load_model
from moegen.testing import random_inputs, random_weights

ROTATIONS, REPS, SEED = 8, 30, 0  # moegen.bench.bench_layer's defaults

spec = load_model(sys.argv[1])
layer = load(Path(sys.argv[3]) if len(sys.argv) > 3 else DEFAULT_OUT / spec.variant / "sm90", spec=spec)
w = random_weights(spec, "cuda", SEED)
for T in (int(t) for t in sys.argv[2].split(",")):
    k1, k2 = layer.choose_kernels(T)
    block_n = layer.kernels[k1].block_n
    graphs, stats = [], []
    for r in range(ROTATIONS):
        x = random_inputs(spec, T, "cuda", SEED + 100 * T + r)
        res = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(k1, k2))
        ids = res.topk_ids.long()
        rows = torch.bincount(ids.flatten(), minlength=spec.num_experts)
        tiles = int(((rows + block_n - 1) // block_n).sum())
        stats.append((int((rows > 0).sum()), int(rows.max()), tiles))
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(k1, k2))
        graphs.append((g, x))
    times = replay_times_us([g for g, _ in graphs], REPS)  # REPS rounds over the sets, in order
    print(f"T={T} kernels={layer.kernels[k1].name},{layer.kernels[k2].name}")
    for r, (hit, biggest, tiles) in enumerate(stats):
        mine = sorted(times[r::ROTATIONS])
        print(f"  set {r}: experts hit {hit:3d}  largest expert {biggest:5d} rows  gemm1 work tiles {tiles:4d}  "
              f"median {statistics.median(mine):8.1f} us  (min {mine[0]:8.1f}, max {mine[-1]:8.1f})")
    del graphs
