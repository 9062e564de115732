"""The benchmark's input sets one by one: why `moegen bench`'s p10 and p90 lie apart.

For each T, the same 8 input sets as `moegen bench` (same seeds): experts hit, the largest expert's
rows, GEMM1 work tiles at the picked kernel's block_n, and the median of that set's graph replays.

    python3 tools/bench_sets.py deepseek-v4-flash 1024,4096 [build-dir]
"""
import statistics
import sys
from pathlib import Path

import torch

from moegen.bench import input_set_graphs, replay_times_us
from moegen.cli import DEFAULT_OUT
from moegen.runtime import load
from moegen.spec import load_model
from moegen.testing import random_weights

ROTATIONS, REPS, SEED = 8, 30, 0  # moegen.bench.bench_layer's defaults

spec = load_model(sys.argv[1])
layer = load(Path(sys.argv[3]) if len(sys.argv) > 3 else DEFAULT_OUT / spec.variant / "sm90", spec=spec)
w = random_weights(spec, "cuda", SEED)
for T in (int(t) for t in sys.argv[2].split(",")):
    k1, k2 = layer.choose_kernels(T)
    block_n = layer.kernels[k1].block_n
    sets = input_set_graphs(layer, w, T, (k1, k2), ROTATIONS, SEED)
    times = replay_times_us([g for g, _, _ in sets], REPS)  # REPS rounds over the sets, in order
    print(f"T={T} kernels={layer.kernels[k1].name},{layer.kernels[k2].name}")
    for r, (_, _, topk_ids) in enumerate(sets):
        rows = torch.bincount(topk_ids.long().flatten(), minlength=spec.num_experts)
        tiles = int(((rows + block_n - 1) // block_n).sum())
        mine = sorted(times[r::ROTATIONS])
        print(f"  set {r}: experts hit {int((rows > 0).sum()):3d}  largest expert {int(rows.max()):5d} rows  "
              f"gemm1 work tiles {tiles:4d}  median {statistics.median(mine):8.1f} us  "
              f"(min {mine[0]:8.1f}, max {mine[-1]:8.1f})")
    del sets
