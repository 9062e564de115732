"""Per-kernel time of the layer under CUDA-graph replay (torch.profiler / CUPTI, kernels not
serialized, unlike ncu): where a layer call's microseconds go, gaps included.

    python3 tools/timeline.py deepseek-v4-flash 1,64,1024 [build-dir] [picks]
The first argument is a build's variant (deepseek-v4-flash-w4a8: the W4A8 one); the build dir
defaults to generated/<variant>/sm90, and the spec is the library's.  picks (optional) fixes the
kernels per T instead of the dispatch: "1=m64n8k128s6+m64n8k128s6,1024=m128n64k64s6+m128n64k64s6"
(gemm1 tile + gemm2 tile).  Each T replays four captured input sets in turn, synchronizing after
every replay, and reports medians of 20.
"""
import collections
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from moegen.bench import input_sets
from moegen.paths import DEFAULT_OUT
from moegen.runtime import load
from moegen.testing import random_weights

variant = sys.argv[1]
tokens = [int(t) for t in sys.argv[2].split(",")]
layer = load(Path(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else DEFAULT_OUT / variant / "sm90")
spec = layer.spec
w = random_weights(spec, "cuda", 1, layer.weight_layout)
names = [k.name for k in layer.kernels]
picks = {}
for item in (sys.argv[4].split(",") if len(sys.argv) > 4 else []):
    t, pair = item.split("=")
    g1, g2 = pair.split("+")
    arch = layer.manifest.arch
    picks[int(t)] = (names.index(f"moegen_{arch}_gemm1_{g1}"), names.index(f"moegen_{arch}_gemm2_{g2}"))
REPS = 20


def short(name: str) -> str:
    for key in ("zero_counters", "route", "scatter", "quantize", "finalize", "memset", "Memset"):
        if key in name:
            return key.lower()
    if "grouped_gemm" in name:
        return "gemm1" if "Swiglu" in name else "gemm2"
    return name[:40]


ROTATIONS = 4  # input sets (different tokens, so different experts) replayed in turn, as the bench does


for T in tokens:
    kernels = picks.get(T, layer.choose_kernels(T))
    sets = input_sets(layer, w, T, kernels, ROTATIONS, seed=2)  # the bench's: each run once, then captured
    for r in range(5):
        sets.graphs[r % ROTATIONS].replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for r in range(REPS):
            sets.graphs[r % ROTATIONS].replay()
            torch.cuda.synchronize()  # replays apart, so each one's span is its own
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
    per = collections.defaultdict(list)
    n = len(events) // REPS  # every replay launches the same kernels
    assert n > 0 and len(events) == n * REPS, f"{len(events)} kernel events for {REPS} replays"
    calls = [events[i * n:(i + 1) * n] for i in range(REPS)]
    spans = []
    for c in calls:
        t0 = c[0].time_range.start
        spans.append(max(e.time_range.end for e in c) - t0)
        for e in c:
            per[short(e.name)].append((e.time_range.start - t0, e.time_range.end - t0))
    span = sorted(spans)[len(spans) // 2]
    print(f"T={T} kernels={[layer.kernels[i].name for i in kernels]} span median {span:.1f} us")
    for k, v in per.items():  # median start / end within the call: PDL overlap shows as start < previous end
        st = sorted(a for a, _ in v)[len(v) // 2]
        en = sorted(b for _, b in v)[len(v) // 2]
        print(f"   {k:10s} start {st:8.1f}  end {en:8.1f}  duration {en - st:8.1f}")
