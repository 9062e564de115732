"""`moegen check`: every kernel of a built library against the float64 reference on the local GPU.

The first thing to run on a GPU moegen's kernels have not run on before.  Per token count, with
fresh random weights and inputs (the seed is printed), outputs poisoned first: each GEMM kernel at
least once (paired in rotation with the other GEMM's kernels), the dispatch table's own choice,
skewed routing (every token on the same experts), the experts-only entry point, the batched entry
point on the same routing's rows grouped by expert (where the build takes batched calls), and a
CUDA-graph replay that must equal the eager call bitwise.  Pass: no NaN (every element written) and relative
L2 error within moegen.testing.tolerance of the float64 reference in the library's activation format
(BF16 5e-3; W4A8 and MXFP8 1e-2, wider below 16 output rows, where one row's error is a few flipped
e4m3 steps of `h`).

On a GPU the kernels have not run on, a failure must say where it happened: a call that raises (a CUDA
error, after which the context is unusable) ends the check with the kernels and T it ran; a call still
running after a minute is reported while it runs; a failing output is followed by a diagnosis line
(moegen.check.diagnosis).  `only` restricts the pairs to the named kernels.
"""
from __future__ import annotations

import math
import random
import threading
from typing import Callable

import torch

from .artifact import source_commit
from .runtime import MoeLayer
from .testing import (batched_reference, batched_rows, random_inputs, random_weights, reference_output, relative_l2,
                      tolerance)


STILL_RUNNING_SECONDS = 60.0


def diagnosis(out: torch.Tensor, ref: torch.Tensor, ids: torch.Tensor) -> str:
    """Where a failing output goes wrong, in one line: its worst token and that token's experts, the
    NaN elements (unwritten output, or a poisoned scale read), and the least-squares scale of the output
    against the reference (a power of two other than 1: an exponent or scale-byte offset)."""
    out, ref = out.double().cpu(), ref.double().cpu()
    nan_rows = torch.isnan(out).any(dim=1)
    parts = []
    if nan_rows.any():
        parts.append(f"NaN in {int(torch.isnan(out).sum())} elements of {int(nan_rows.sum())} tokens "
                     f"(first: token {int(nan_rows.nonzero()[0])})")
    good = ~nan_rows & (ref.norm(dim=1) > 0)
    if good.any():
        o, r = out[good], ref[good]
        row_err = (o - r).norm(dim=1) / r.norm(dim=1)
        worst = int(good.nonzero()[int(row_err.argmax())])
        parts.append(f"worst token {worst} (experts {ids[worst].tolist()}): rel L2 {float(row_err.max()):.2e}")
        scale = ((o * r).sum(dim=1) / (r * r).sum(dim=1)).median().item()
        log2 = math.log2(abs(scale)) if math.isfinite(scale) and scale else 0.0
        power = round(log2)
        shown = f"{scale:.4g}" + (f" = 2^{power}" if power and abs(log2 - power) < 0.01 else "")
        parts.append(f"output / reference scale (median over tokens) {shown}")
    return "; ".join(parts) or "no token with a nonzero reference"


class _Stopped(Exception):
    pass


def check_library(layer: MoeLayer, tokens: list[int], seed: int | None = None,
                  log: Callable[[str], None] = print, only: list[str] | None = None) -> bool:
    seed = random.randrange(1 << 30) if seed is None else seed
    spec, fmt = layer.spec, layer.manifest.activation_format
    names = [k.name for k in layer.kernels]
    unknown = [n for n in only or () if n not in names]
    if unknown:
        raise ValueError(f"--kernels: {unknown[0]} is not in this library (it has {', '.join(names)})")
    log(f"moegen check: {layer.manifest.variant} ({layer.manifest.arch}, {fmt} activations, {len(layer.kernels)} "
        f"kernels) on {layer.gpu.name}, seed {seed}, tolerance {tolerance(fmt, 1 << 30)}"
        + (f" ({tolerance(fmt, 1):.1e} for one row)" if tolerance(fmt, 1) != tolerance(fmt, 1 << 30) else ""))
    # what a report from another machine needs to be reproduced
    tools = layer.manifest.data.get("toolchain", {})
    log(f"moegen {source_commit()}, built with nvcc {tools.get('nvcc', '?')} and CUTLASS {tools.get('cutlass', '?')}; "
        f"driver {layer.gpu.driver}, torch {torch.__version__} (CUDA {layer.gpu.cuda}), "
        f"{layer.gpu.sm_count} SMs")
    w = random_weights(spec, "cuda", seed, layer.weight_layout)

    def kernels_of(gemm: str) -> list[int]:
        mine = [i for i, k in enumerate(layer.kernels) if k.gemm == gemm]
        chosen = [i for i in mine if names[i] in (only or ())]
        return chosen or mine  # a GEMM none of whose kernels is named runs all of them

    g1, g2 = kernels_of("gemm1"), kernels_of("gemm2")
    pairs = [(g1[i % len(g1)], g2[i % len(g2)]) for i in range(max(len(g1), len(g2)))]
    failures = 0

    def report(what: str, T: int, err: float | None, ok: bool) -> None:
        nonlocal failures
        failures += not ok
        shown = "no output rows" if err is None else f"rel L2 {err:.2e}"
        log(f"{'PASS' if ok else 'FAIL'}  T={T:<6d} {what}: {shown}")

    def run(what: str, T: int, fn):
        """fn() and a device synchronization, reported if it raises or is still running after a minute."""
        watchdog = threading.Timer(STILL_RUNNING_SECONDS, log, args=(
            f"still running after {STILL_RUNNING_SECONDS:.0f} s: T={T} {what} (a hang? Ctrl-C stops the check)",))
        watchdog.daemon = True
        watchdog.start()
        try:
            result = fn()
            torch.cuda.synchronize()
            return result
        except RuntimeError as e:
            report(what, T, None, False)
            log(f"moegen check: stopped at T={T} {what}: {' '.join(str(e).split())} (a CUDA error leaves the "
                f"context unusable; `moegen check --kernels` runs chosen kernels alone) (seed {seed})")
            raise _Stopped from None
        finally:
            watchdog.cancel()

    def pair_name(kernels: tuple[int, int]) -> str:
        return f"{names[kernels[0]]} + {names[kernels[1]]}"

    try:
        for T in tokens:
            chosen = pairs[0] if only else layer.choose_kernels(T)  # the table's pair, unless kernels are named
            for skew in (False, True) if T > 0 else (False,):
                x = random_inputs(spec, T, "cuda", seed + 1000 * T + skew, skew=skew)
                runs = [chosen] if skew else pairs if only else [*pairs, chosen]
                for kernels in runs:
                    name = pair_name(kernels) + (" skewed" if skew else "")
                    res = run(name, T, lambda: layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=kernels,
                                                     poison=True))
                    if T == 0:
                        report(name, T, None, res.out.shape == (0, spec.hidden_size))
                        continue
                    ref = reference_output(spec, w, x, res.topk_ids, fmt)
                    err = relative_l2(res.out, ref)
                    ok = not torch.isnan(res.out).any().item() and err <= tolerance(fmt, T)
                    report(name, T, err, ok)
                    if not ok:
                        log(f"      {diagnosis(res.out, ref, res.topk_ids)}")
            if T == 0:
                continue
            x = random_inputs(spec, T, "cuda", seed + 7 + T)
            what = f"experts-only entry point on the router's choice ({pair_name(chosen)})"
            fused = run(what, T, lambda: layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=chosen))
            experts = run(what, T, lambda: layer.experts(x.hidden, fused.topk_ids, fused.topk_weights, w.prepared,
                                                         kernels=chosen, poison=True))
            report(what, T, relative_l2(experts, reference_output(spec, w, x, fused.topk_ids, fmt)),
                   torch.equal(experts, fused.out))
            if layer.library.max_tokens_per_expert:
                what = f"batched entry point on the router's choice, rows grouped by expert ({pair_name(chosen)})"
                rows = batched_rows(spec, x.hidden, fused.topk_ids)
                out = run(what, T, lambda: layer.experts_batched(rows.hidden, rows.counts, w.prepared, num_tokens=T,
                                                                 kernels=chosen, poison=True))
                n = int(rows.written.sum())
                err = relative_l2(out[rows.written], batched_reference(spec, w, rows.hidden, rows.counts, fmt)) \
                    if n else None
                ok = (not torch.isnan(out[rows.written]).any().item() and torch.isnan(out[~rows.written]).all().item()
                      and (err is None or err <= tolerance(fmt, n)))
                report(what, T, err, ok)
            what = f"CUDA-graph replay equals the eager call bitwise ({pair_name(chosen)})"

            def replay():
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    replayed = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=chosen)
                graph.replay()
                return replayed

            replayed = run(what, T, replay)
            report(what, T, 0.0, torch.equal(replayed.out, fused.out))
    except _Stopped:
        return False
    log(f"moegen check: {'all passed' if not failures else f'{failures} FAILED'} (seed {seed})")
    return failures == 0
