"""Per-GPU autotuning: time the built kernels per token-count bucket, write a dispatch table.

The profiler is injected (a callable ``(tokens, gemm1_index, gemm2_index) -> microseconds`` that
raises on failure), so the search, the bucket logic and the table format are testable without a
GPU.  A config that fails to launch or to verify scores infinity with its reason; every timing is
kept in the table next to the GPU and library it was measured on.
"""
from __future__ import annotations

import json
import math
import re
import statistics
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from .build import atomic_write
from .config_space import KernelConfig
from .spec import ModelSpec

TABLE_SCHEMA = 1
BUCKETS = tuple(2**i for i in range(15))  # 1, 2, 4, ..., 16384 tokens

Profiler = Callable[[int, int, int], float]


class TuneError(RuntimeError):
    pass


@dataclass(frozen=True)
class GpuInfo:
    name: str
    sm_count: int
    driver: str
    cuda: str

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-") + f"-{self.sm_count}sm"


@dataclass(frozen=True)
class Measurement:
    tokens: int
    gemm1: str
    gemm2: str
    us: float  # math.inf when the config failed
    reason: str = ""


def rows_per_expert(spec: ModelSpec, tokens: int) -> float:
    """Average rows an expert receives: T * top_k / E over all experts (expert parallelism does not
    change it, each rank just owns fewer experts)."""
    return tokens * spec.top_k / spec.num_experts


# Pruning for one bucket: each rule one line, with its reason. The search never times these.
PRUNE_RULES: list[tuple[str, Callable[[KernelConfig, float], bool]]] = [
    ("block_n over 4x the average rows per expert: the tile would be mostly zero padding",
     lambda c, rows: c.block_n > 4 * max(8.0, rows)),
    ("block_n under 1/16 of the rows per expert: the same weights would stream 16+ times per expert",
     lambda c, rows: 16 * c.block_n < rows),
]


def pruned(c: KernelConfig, rows: float) -> str | None:
    return next((reason for reason, hit in PRUNE_RULES if hit(c, rows)), None)


def heuristic_choice(kernels: list[KernelConfig], spec: ModelSpec, tokens: int) -> tuple[int, int]:
    """The documented fallback: per GEMM, the smallest block_n covering the average rows per expert
    (ties: fewer weight rows per CTA, then deeper pipelines), else the largest block_n."""
    rows = rows_per_expert(spec, tokens)
    picks = []
    for gemm in ("gemm1", "gemm2"):
        cands = [(i, k) for i, k in enumerate(kernels) if k.gemm == gemm]
        if not cands:
            raise TuneError(f"the library has no {gemm} kernel")
        covering = [(k.block_n, k.block_m, -k.stages, i) for i, k in cands if k.block_n >= rows]
        picks.append(min(covering)[3] if covering else max((k.block_n, -k.block_m, k.stages, i)
                                                           for i, k in cands)[3])
    return picks[0], picks[1]


# Confirmation: the best few of each GEMM's coordinate stage, every pairing timed again this many
# times; the pair with the lowest median wins.  One five-replay median did not separate the prefill
# candidates on the H200 (its T = 4096 pick benched 5 % above its tuner time; docs/benchmarks.md).
CONFIRM_TOP = 3
CONFIRM_ROUNDS = 2


def _timed(profiler: Profiler, tokens: int, g1: int, g2: int) -> tuple[float, str]:
    try:
        us = float(profiler(tokens, g1, g2))
        reason = "" if math.isfinite(us) else "profiler returned a non-finite time"
    except Exception as e:  # noqa: BLE001 - any failure scores infinity with its reason
        us, reason = math.inf, f"{type(e).__name__}: {e}"
    return (us if math.isfinite(us) else math.inf), reason


def search(kernels: list[KernelConfig], spec: ModelSpec, profiler: Profiler, buckets=BUCKETS,
           log: Callable[[str], None] = print) -> tuple[dict[int, tuple[int, int, float]], list[Measurement]]:
    """Per bucket: coordinate search (best GEMM1 with the fallback GEMM2, then best GEMM2 with it),
    then a confirmation round over the best CONFIRM_TOP of each, every pairing timed CONFIRM_ROUNDS
    more times, the lowest median pair winning (a pair failing any timing is out).

    The two GEMMs are separate launches sharing only the schedule, so their choices barely interact;
    this costs n1 + n2 + CONFIRM_ROUNDS * CONFIRM_TOP^2 timings per bucket instead of n1 * n2.
    """
    choices, measurements = {}, []
    for bi, tokens in enumerate(buckets):
        rows = rows_per_expert(spec, tokens)
        base1, base2 = heuristic_choice(kernels, spec, tokens)
        best, ranked = {}, {}
        for gemm, fixed in (("gemm1", base2), ("gemm2", None)):
            cands = [i for i, k in enumerate(kernels) if k.gemm == gemm]
            timed = [i for i in cands if pruned(kernels[i], rows) is None] or cands
            results = []
            for i in timed:
                g1, g2 = (i, fixed) if gemm == "gemm1" else (best["gemm1"][0], i)
                us, reason = _timed(profiler, tokens, g1, g2)
                measurements.append(Measurement(tokens, kernels[g1].name, kernels[g2].name, us, reason))
                results.append((us, i))
            us, i = min(results)
            if not math.isfinite(us):
                raise TuneError(f"T={tokens}: every {gemm} candidate failed; first reason: "
                                f"{next(m.reason for m in measurements if m.tokens == tokens)}")
            best[gemm] = (i, us)
            ranked[gemm] = [i for us, i in sorted(results) if math.isfinite(us)][:CONFIRM_TOP]
        times = {(best["gemm1"][0], best["gemm2"][0]): [best["gemm2"][1]]}
        for _ in range(CONFIRM_ROUNDS):
            for g1 in ranked["gemm1"]:
                for g2 in ranked["gemm2"]:
                    us, reason = _timed(profiler, tokens, g1, g2)
                    measurements.append(Measurement(tokens, kernels[g1].name, kernels[g2].name, us, reason))
                    times.setdefault((g1, g2), []).append(us)
        scored = [(statistics.median(ts), pair) for pair, ts in times.items() if all(math.isfinite(t) for t in ts)]
        if not scored:
            raise TuneError(f"T={tokens}: every confirmed pair failed")
        us, (g1, g2) = min(scored)
        choices[tokens] = (g1, g2, us)
        log(f"[{bi + 1}/{len(buckets)}] T={tokens}: {kernels[g1].name} + {kernels[g2].name}: {us:.1f} us")
    return choices, measurements


def make_table(spec: ModelSpec, arch: str, fingerprint: str, gpu: GpuInfo, kernels: list[KernelConfig],
               choices: dict[int, tuple[int, int, float]], measurements: list[Measurement]) -> dict:
    return dict(
        schema=TABLE_SCHEMA, variant=spec.variant, arch=arch, library_fingerprint=fingerprint, gpu=asdict(gpu),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        buckets=[dict(tokens=t, gemm1=kernels[g1].name, gemm2=kernels[g2].name, us=us)
                 for t, (g1, g2, us) in sorted(choices.items())],
        measurements=[dict(asdict(m), us=None if math.isinf(m.us) else m.us) for m in measurements])


def table_path(out_dir: Path, gpu: GpuInfo) -> Path:
    return out_dir / "dispatch" / f"{gpu.slug}.json"


def save_table(out_dir: Path, table: dict) -> Path:
    path = table_path(out_dir, GpuInfo(**table["gpu"]))
    atomic_write(path, json.dumps(table, indent=1) + "\n")
    return path


class Dispatch:
    """Bucket lookup: the table's choice for the smallest bucket >= T (the largest beyond it)."""

    def __init__(self, table: dict, kernel_names: list[str]):
        rows = sorted(table["buckets"], key=lambda b: b["tokens"])
        if not rows:
            raise TuneError("dispatch table has no buckets")
        index = {n: i for i, n in enumerate(kernel_names)}
        missing = [n for b in rows for n in (b["gemm1"], b["gemm2"]) if n not in index]
        if missing:
            raise TuneError(f"dispatch table names {missing[0]}, which the library does not have")
        self.tokens = [b["tokens"] for b in rows]
        self.picks = [(index[b["gemm1"]], index[b["gemm2"]]) for b in rows]

    def choose(self, tokens: int) -> tuple[int, int]:
        for t, pick in zip(self.tokens, self.picks):
            if tokens <= t:
                return pick
        return self.picks[-1]


def load_dispatch(out_dir: Path, gpu: GpuInfo, fingerprint: str, kernel_names: list[str]) -> tuple[Dispatch | None, str]:
    """The table for this GPU and library, or (None, why not)."""
    path = table_path(out_dir, gpu)
    try:
        table = json.loads(path.read_text())
    except FileNotFoundError:
        return None, f"no dispatch table for {gpu.name} ({gpu.sm_count} SMs) at {path}; run `moegen tune`"
    except ValueError as e:
        return None, f"{path}: not valid JSON ({e})"
    if table.get("schema") != TABLE_SCHEMA:
        return None, f"{path}: schema {table.get('schema')!r}, expected {TABLE_SCHEMA}; re-run `moegen tune`"
    if table.get("library_fingerprint") != fingerprint:
        return None, f"{path}: tuned for another build of the library; re-run `moegen tune`"
    if GpuInfo(**table["gpu"]) != gpu:
        return None, f"{path}: tuned on {table['gpu']}, this GPU is {asdict(gpu)}; re-run `moegen tune`"
    try:
        return Dispatch(table, kernel_names), ""
    except TuneError as e:
        return None, f"{path}: {e}"


_warned: set[str] = set()


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message + " (using the block_n heuristic)", RuntimeWarning, stacklevel=3)
