"""Where the one-block routing kernel's time goes: a lab build whose route_one_block_kernel stamps
clock64 at its phases (thread 0) into a device array, read after each CUDA-graph replay.

    python3 lab/routing_stamps.py BUILD_DIR T,... [picks as tools/timeline.py]
Prints, per T, the median over 20 replays of each phase's cycles and the kernel's whole span in µs.
"""
import ctypes
import statistics
import sys
from pathlib import Path

import torch

from moegen.bench import input_sets
from moegen.runtime import load
from moegen.testing import random_weights
from picks import parse_picks

PHASES = ["zero counts + barrier", "logit loads + scores", "top-k", "weights, counts, stores",
          "barrier", "schedule", "barrier", "scatter"]
layer = load(Path(sys.argv[1]))
tokens = [int(t) for t in sys.argv[2].split(",")]
picks = parse_picks(layer, sys.argv[3] if len(sys.argv) > 3 else None)
w = random_weights(layer.spec, "cuda", 1, layer.weight_layout)
dll = layer.library.dll
buf = (ctypes.c_longlong * 16)()
for T in tokens:
    sets = input_sets(layer, w, T, picks.get(T, layer.choose_kernels(T)), 4, seed=2)
    rows = []
    for r in range(24):
        sets.graphs[r % 4].replay()
        torch.cuda.synchronize()
        assert dll.moegen_lab_stamps(buf) == 0
        s = list(buf)
        if r >= 4:
            rows.append(s)
    cyc = [[row[i + 1] - row[i] for i in range(8)] for row in rows]
    total_c = [row[8] - row[0] for row in rows]
    total_ns = [row[11] - row[10] for row in rows]
    ghz = statistics.median(c / n for c, n in zip(total_c, total_ns) if n > 0) if any(total_ns) else 1.98
    med = [statistics.median(c[i] for c in cyc) for i in range(8)]
    print(f"T={T} {layer.spec.name}: entry->end {statistics.median(total_c)} cycles, "
          f"{statistics.median(total_ns) / 1e3:.2f} us by globaltimer ({ghz:.2f} GHz)")
    for name, c in zip(PHASES, med):
        print(f"   {name:28s} {c:8.0f} cycles {c / ghz / 1e3:6.2f} us")
