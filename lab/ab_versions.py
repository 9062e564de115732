"""A/B of two moegen versions (two checkouts, each with its own build) under one timing harness, so
that only the library differs: each run is its own process importing the moegen found first on
PYTHONPATH, and the runs alternate A, B, A, B on one GPU.  Kernels are picked by name: the first run
records what its layer's choose_kernels(T) picks, the others use the same names.

  PYTHONPATH=CHECKOUT python3 lab/ab_versions.py BUILD_DIR SPEC OUT.json [--tokens 1,4,...]
      [--same-kernels FIRST_RUN.json]

The harness: fixed seeds (weights 0, inputs 100*T + r, 4 input sets), one CUDA graph per input set,
a 2 s warm-up at the heaviest T (the power-capped steady state), then per T 1 s of warm-up and at
least 60 back-to-back replays with no host sync, the median reported.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("--tokens", default="1,4,16,64,256,1024,4096,16384")
    ap.add_argument("--same-kernels", default=None)
    args = ap.parse_args()

    import moegen
    from moegen.runtime import load
    from moegen.spec import load_model
    from moegen.testing import random_inputs, random_weights

    spec = load_model(args.spec)
    layer = load(args.build_dir, spec=spec)
    names = [k.name for k in layer.kernels]
    picks = json.loads(Path(args.same_kernels).read_text())["kernels"] if args.same_kernels else {}
    w = random_weights(spec, "cuda", 0)
    tokens = [int(t) for t in args.tokens.split(",")]

    def graphs_for(t: int):
        if str(t) in picks:
            k = tuple(names.index(n) for n in picks[str(t)])
        else:
            k = tuple(layer.choose_kernels(t))
        gs = []
        for r in range(4):
            x = random_inputs(spec, t, "cuda", 100 * t + r)
            layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=k)  # first launch outside capture
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=k)
            gs.append(g)
        return k, gs

    def spin(gs, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for g in gs:
                g.replay()
            torch.cuda.synchronize()

    _, heavy = graphs_for(max(tokens))
    spin(heavy, 2.0)
    del heavy
    result = {"moegen": str(Path(moegen.__file__).parent), "build": args.build_dir, "kernels": {}, "us": {}}
    for t in tokens:
        k, gs = graphs_for(t)
        spin(gs, 1.0)
        events = []
        for _ in range(max(15, int(0.5e6 / max(t, 64) / 4))):
            for g in gs:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                events.append((a, b))
        torch.cuda.synchronize()
        us = statistics.median(a.elapsed_time(b) * 1e3 for a, b in events)
        result["kernels"][str(t)] = [names[i] for i in k]
        result["us"][str(t)] = us
        print(f"T={t}: {us:.1f} us ({len(events)} replays) {names[k[0]]} {names[k[1]]}", flush=True)
        del gs
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
