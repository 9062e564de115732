"""`moegen check`: every kernel of a built library against the float64 reference on the local GPU.

The first thing to run on a GPU moegen's kernels have not run on before.  Per token count, with
fresh random weights and inputs (the seed is printed), outputs poisoned first: each GEMM kernel at
least once (paired in rotation with the other GEMM's kernels), the dispatch table's own choice,
skewed routing (every token on the same experts), the experts-only entry point, and a CUDA-graph
replay that must equal the eager call bitwise.  Pass: no NaN (every element written) and relative
L2 error within moegen.testing.tolerance of the float64 reference in the library's activation format
(BF16 5e-3; MXFP8 3e-2; W4A8 1e-2, wider below 16 output rows, where one row's error is a few
flipped e4m3 steps of `h`).
"""
from __future__ import annotations

import random
from typing import Callable

import torch

from .runtime import MoeLayer
from .testing import random_inputs, random_weights, reference_output, relative_l2, tolerance


def check_library(layer: MoeLayer, tokens: list[int], seed: int | None = None,
                  log: Callable[[str], None] = print) -> bool:
    seed = random.randrange(1 << 30) if seed is None else seed
    spec, fmt = layer.spec, layer.manifest.activation_format
    log(f"moegen check: {layer.manifest.variant} ({layer.manifest.arch}, {fmt} activations, {len(layer.kernels)} "
        f"kernels) on {layer.gpu.name}, seed {seed}, tolerance {tolerance(fmt, 1 << 30)}"
        + (f" ({tolerance(fmt, 1):.1e} for one row)" if tolerance(fmt, 1) != tolerance(fmt, 1 << 30) else ""))
    w = random_weights(spec, "cuda", seed, layer.weight_layout)
    g1 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm1"]
    g2 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm2"]
    pairs = [(g1[i % len(g1)], g2[i % len(g2)]) for i in range(max(len(g1), len(g2)))]
    failures = 0

    def report(what: str, T: int, err: float | None, ok: bool) -> None:
        nonlocal failures
        failures += not ok
        shown = "no output rows" if err is None else f"rel L2 {err:.2e}"
        log(f"{'PASS' if ok else 'FAIL'}  T={T:<6d} {what}: {shown}")

    for T in tokens:
        for skew in (False, True) if T > 0 else (False,):
            x = random_inputs(spec, T, "cuda", seed + 1000 * T + skew, skew=skew)
            for kernels in ([*pairs, layer.choose_kernels(T)] if not skew else [layer.choose_kernels(T)]):
                res = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=kernels, poison=True)
                torch.cuda.synchronize()
                name = f"{layer.kernels[kernels[0]].name} + {layer.kernels[kernels[1]].name}" + (" skewed" if skew else "")
                if T == 0:
                    report(name, T, None, res.out.shape == (0, spec.hidden_size))
                    continue
                err = relative_l2(res.out, reference_output(spec, w, x, res.topk_ids, fmt))
                report(name, T, err, not torch.isnan(res.out).any().item() and err <= tolerance(fmt, T))
        if T == 0:
            continue
        x = random_inputs(spec, T, "cuda", seed + 7 + T)
        fused = layer(x.hidden, x.logits, w.prepared, x.score_bias)
        experts = layer.experts(x.hidden, fused.topk_ids, fused.topk_weights, w.prepared, poison=True)
        torch.cuda.synchronize()
        report("experts-only entry point on the router's choice", T,
               relative_l2(experts, reference_output(spec, w, x, fused.topk_ids, fmt)), torch.equal(experts, fused.out))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            replayed = layer(x.hidden, x.logits, w.prepared, x.score_bias)
        graph.replay()
        torch.cuda.synchronize()
        report("CUDA-graph replay equals the eager call bitwise", T, None if T == 0 else 0.0,
               torch.equal(replayed.out, fused.out))
    log(f"moegen check: {'all passed' if not failures else f'{failures} FAILED'} (seed {seed})")
    return failures == 0
