"""Where each GEMM CTA's time goes at decode: a lab build (lab/experiments/gemm_cta_stamps.patch)
whose GEMM kernels stamp %globaltimer per CTA (thread 0: entry, schedule read, first and last K tile
landed, end; its SM), read after each CUDA-graph replay.

    python3 lab/gemm_cta_stamps.py BUILD_DIR T,... [picks as tools/timeline.py]      (GPU machine)

Per T and GEMM, medians over 20 replays (4 input sets in turn) of: when the CTAs enter, when their
first K tile lands, the steady time per K tile, when the last lands and when they end, all in µs from
GEMM1's first CTA entry; CTAs per SM; and the ends' spread (the wave tail).
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

MAX_CTAS = 16384  # the patch's kLabMaxCtas
layer = load(Path(sys.argv[1]))
tokens = [int(t) for t in sys.argv[2].split(",")]
names = [k.name for k in layer.kernels]
picks = parse_picks(layer, sys.argv[3] if len(sys.argv) > 3 else None)
dll = layer.library.dll
dll.moegen_lab_cta_stamps.argtypes = [ctypes.c_void_p]
assert dll.moegen_lab_cta_stamps(None) == 0  # allocate before any capture
w = random_weights(layer.spec, "cuda", 1, layer.weight_layout)
buf = (ctypes.c_ulonglong * (2 * MAX_CTAS * 8))()


def q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")


for T in tokens:
    kernels = picks.get(T, layer.choose_kernels(T))
    sets = input_sets(layer, w, T, kernels, 4, seed=2)
    k_tiles = {}
    stats = {0: [], 1: []}
    for r in range(24):
        assert dll.moegen_lab_cta_stamps(None) == 0  # clear
        sets.graphs[r % 4].replay()
        torch.cuda.synchronize()
        assert dll.moegen_lab_cta_stamps(buf) == 0
        if r < 4:
            continue
        words = list(buf)
        ctas = [[words[(g * MAX_CTAS + b) * 8: (g * MAX_CTAS + b) * 8 + 8] for b in range(MAX_CTAS)] for g in (0, 1)]
        t0 = min(c[0] for c in ctas[0] if c[0])
        for g in (0, 1):
            run = [c for c in ctas[g] if c[4]]  # CTAs that ran a tile
            if not run:
                continue
            rel = lambda i: [(c[i] - t0) / 1e3 for c in run]  # noqa: E731
            per_sm = {}
            for c in run:
                per_sm[c[5]] = per_sm.get(c[5], 0) + 1
            stats[g].append(dict(
                ctas=len(run), sms=len(per_sm), max_per_sm=max(per_sm.values()),
                entry_first=min(rel(0)), entry_median=statistics.median(rel(0)), entry_last=max(rel(0)),
                first_tile_median=statistics.median(rel(2)),
                first_tile_latency=statistics.median([(c[2] - c[0]) / 1e3 for c in run]),
                after_wait=statistics.median([(c[6] - c[0]) / 1e3 for c in run]),
                steady_per_tile=statistics.median([(c[3] - c[2]) / 1e3 for c in run]),
                last_tile_median=statistics.median(rel(3)), end_p10=q(rel(4), 0.1),
                end_median=statistics.median(rel(4)), end_last=max(rel(4))))
    print(f"T={T} {layer.spec.name} kernels={[names[i] for i in kernels]}")
    for g in (0, 1):
        if not stats[g]:
            continue
        med = {k: statistics.median(s[k] for s in stats[g]) for k in stats[g][0]}
        print(f"  gemm{g + 1}: {med['ctas']:.0f} CTAs on {med['sms']:.0f} SMs (at most {med['max_per_sm']:.0f} per SM); "
              f"entry {med['entry_first']:.1f} / {med['entry_median']:.1f} / {med['entry_last']:.1f}; "
              f"consumers past pdl_wait +{med['after_wait']:.1f}; first K tile lands +{med['first_tile_latency']:.1f} "
              f"(median at {med['first_tile_median']:.1f}); first to last K tile {med['steady_per_tile']:.1f}; "
              f"last lands {med['last_tile_median']:.1f}; end p10 / median / last "
              f"{med['end_p10']:.1f} / {med['end_median']:.1f} / {med['end_last']:.1f} us")
