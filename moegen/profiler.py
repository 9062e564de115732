"""Timing a built layer on the GPU at steady state: CUDA-graph replays back to back (no host sync
between them, so the GPU never idles into a higher boost clock), after a warm-up of the same work,
with the SM clock, power and energy recorded over the timed window.

`moegen tune` times candidates with LayerProfiler; `moegen bench` uses the same replay timing.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from .dispatch import heuristic_choice
from .gpu_monitor import GpuMonitor, PowerState, Window
from .runtime import MoeLayer
from .testing import Inputs, Weights, random_inputs, random_weights, reference_output, relative_l2, tolerance


@dataclass(frozen=True)
class Timing:
    us: float  # mean_of_draw_medians(times_us, input_sets)
    times_us: tuple[float, ...]  # every replay, the input sets in rotation
    power: PowerState
    spans: tuple[tuple[float, float], ...] = ()  # the timed windows (time.monotonic)
    input_sets: int = 1

    def __float__(self) -> float:
        return self.us


def mean_of_draw_medians(times_us, input_sets: int) -> float:
    """The mean over the input sets of each set's median replay time (replays rotate through the sets).
    Each set is a routing draw, and at a few rows per rank the draws' work differs severalfold
    (DeepSeek-V3 --ep-size 8 at T = 1: 13-44 us between p10 and p90, as 0-3 rows land on the rank): the
    median of all replays is then one draw's time, jumping between draws from one candidate to the next.
    Serving pays the mean over draws; a set's median keeps a stray replay out."""
    if len(times_us) % input_sets:
        raise ValueError(f"{len(times_us)} replays do not rotate evenly through {input_sets} input sets")
    return statistics.fmean(statistics.median(times_us[r::input_sets]) for r in range(input_sets))


_POOL = None


def timing_pool():
    """One graph memory pool for every graph captured only to be timed: their outputs are never
    read, so they may share memory, and capturing hundreds of candidates allocates nothing new (at
    T = 16384 each capture's workspace is 1.2 GB)."""
    global _POOL
    if _POOL is None:
        _POOL = torch.cuda.graph_pool_handle()
    return _POOL


class _NoCollect:
    """Stands in for the gc module inside torch.cuda.graph while we capture: its gc.collect() costs
    ~0.1-0.2 s per capture, and a tune captures hundreds of graphs whose garbage is not CUDA memory."""

    @staticmethod
    def collect(*args, **kwargs) -> int:
        return 0


def capture(layer: MoeLayer, w: Weights, x: Inputs, kernels: tuple[int, int], pool=None) -> torch.cuda.CUDAGraph:
    import torch.cuda.graphs as graphs
    g = torch.cuda.CUDAGraph()
    real_gc = getattr(graphs, "gc", None)
    if real_gc is not None:
        graphs.gc = _NoCollect
    try:
        with torch.cuda.graph(g, pool=pool):
            layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=kernels)
    finally:
        if real_gc is not None:
            graphs.gc = real_gc
    return g


# How many rounds the host may run ahead of the GPU.  Enough that the GPU never idles (a replay's
# launch costs the host ~10 us, less than any layer call), few enough that the window ends soon after
# min_seconds: with 64 rounds queued a T = 16384 candidate cost ~2 s instead of ~0.1 s.
QUEUE_ROUNDS = 4


def replay_back_to_back(graphs: list, min_reps: int, min_seconds: float, monitor: GpuMonitor | None) -> Timing:
    """Replay the graphs in rotation, each replay bracketed by events and none followed by a host
    sync, until min_reps rounds and min_seconds have passed: the GPU stays busy throughout."""
    events = []
    t_end = time.monotonic() + min_seconds
    with Window(monitor) as win:
        rounds = 0
        while rounds < min_reps or time.monotonic() < t_end:
            for g in graphs:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                events.append((a, b))
            rounds += 1
            if rounds > QUEUE_ROUNDS:  # wait for the round QUEUE_ROUNDS back: the queue stays full, bounded
                events[-(QUEUE_ROUNDS + 1) * len(graphs)][1].synchronize()
        torch.cuda.synchronize()
    times = tuple(a.elapsed_time(b) * 1e3 for a, b in events)
    return Timing(mean_of_draw_medians(times, len(graphs)), times, win.state, (win.span,), len(graphs))


def pooled(timings: list[Timing], monitor: GpuMonitor | None) -> Timing:
    """One Timing of several windows of the same work (a benchmark's interleaved rounds): every
    replay time, the power state over all the windows, their energy summed."""
    counts = {timing.input_sets for timing in timings}
    if len(counts) != 1:
        raise ValueError(f"windows over different numbers of input sets: {sorted(counts)}")
    input_sets = counts.pop()
    times = tuple(t for timing in timings for t in timing.times_us)
    spans = tuple(s for timing in timings for s in timing.spans)
    energies = [timing.power.energy_j for timing in timings]
    energy = None if None in energies else sum(energies)
    power = monitor.summary_over(list(spans), energy) if monitor is not None else PowerState(energy_j=energy)
    return Timing(mean_of_draw_medians(times, input_sets), times, power, spans, input_sets)


def warm_up(graphs: list, seconds: float) -> None:
    """Run the graphs back to back for `seconds`: the GPU reaches the clock and power it serves at."""
    t_end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < t_end:
        for g in graphs:
            g.replay()
        n += 1
        if n % 16 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()


class LayerProfiler:
    """`moegen tune`'s profiler: (tokens, gemm1, gemm2) -> Timing of the whole layer by graph replay.

    Each config is first run once with poisoned outputs and checked against the float64 reference
    (computed once per token count), within moegen.testing.tolerance for its activation format and
    row count unless `tolerance` overrides it; a config that fails to launch or to verify raises, which the
    tuner scores as infinity with the message as the reason.  Per bucket the GPU is first warmed
    with the heuristic pair's graphs (warm_seconds); each candidate's graphs then replay untimed for
    settle_seconds (its capture and verification idled the GPU, which boosts above the power-capped
    clock at once: without the settle the H200 timed candidates at ~1900 MHz and ~620 W that serve at
    ~1600 MHz and 690 W, and ranked them so) and are timed back to back for at least reps rounds and
    min_seconds, so candidates are compared in the power state serving runs in.
    """

    def __init__(self, layer: MoeLayer, rotations: int = 4, reps: int = 6, min_seconds: float = 0.1,
                 warm_seconds: float = 1.0, settle_seconds: float = 0.25, seed: int = 0, tolerance: float | None = None):
        self.layer, self.rotations, self.reps, self.seed, self.tolerance = layer, rotations, reps, seed, tolerance
        self.min_seconds, self.warm_seconds, self.settle_seconds = min_seconds, warm_seconds, settle_seconds
        self.weights = random_weights(layer.spec, "cuda", seed, layer.weight_layout)
        self.monitor = GpuMonitor()
        self._tokens = None
        self.inputs: list[Inputs] = []
        self.ref: torch.Tensor | None = None

    def _start_bucket(self, tokens: int, kernels: tuple[int, int]) -> None:
        # The bucket counts as started only once its inputs exist and the GPU is warm: a failure here
        # is retried by the next candidate, not charged to it, and no candidate runs on the previous
        # bucket's inputs.
        self._tokens, self.ref = None, None
        self.inputs = [random_inputs(self.layer.spec, tokens, "cuda", self.seed + 100 * tokens + r)
                       for r in range(self.rotations)]
        try:
            graphs = [capture(self.layer, self.weights, x, kernels, timing_pool()) for x in self.inputs]
        except Exception as e:  # noqa: BLE001 - re-raised with what failed: the warm-up, not the candidate
            raise RuntimeError(f"warming the GPU up with the heuristic pair failed: {' '.join(str(e).split())}") from None
        warm_up(graphs, self.warm_seconds)
        self._tokens = tokens

    def __call__(self, tokens: int, gemm1: int, gemm2: int) -> Timing:
        if tokens != self._tokens:
            self._start_bucket(tokens, heuristic_choice(self.layer.kernels, self.layer.spec, tokens))
        spec, w, x0 = self.layer.spec, self.weights, self.inputs[0]
        res = self.layer(x0.hidden, x0.logits, w.prepared, x0.score_bias, kernels=(gemm1, gemm2), poison=True)
        torch.cuda.synchronize()
        if self.ref is None:
            self.ref = reference_output(spec, w, x0, res.topk_ids, self.layer.manifest.activation_format)
        if torch.isnan(res.out).any():
            raise RuntimeError("verification failed: NaN in the output")
        err = relative_l2(res.out, self.ref)
        fmt = self.layer.manifest.activation_format
        bound = self.tolerance if self.tolerance is not None else tolerance(fmt, tokens)
        if err > bound:
            raise RuntimeError(f"verification failed: relative L2 error {err:.2e} > {bound:.2e} ({fmt} activations, "
                               f"{tokens} rows)")
        graphs = [capture(self.layer, w, x, (gemm1, gemm2), timing_pool()) for x in self.inputs]
        warm_up(graphs, self.settle_seconds)
        return replay_back_to_back(graphs, self.reps, self.min_seconds, self.monitor)

    def context_alive(self) -> bool:
        """Whether the GPU still runs work after a failure (a sticky error, such as an illegal
        address, leaves every later call failing)."""
        try:
            probe = torch.ones(1, device="cuda")  # the device the weights and inputs are on
            return (probe + probe).item() == 2.0
        except Exception:  # noqa: BLE001 - whatever the failure, the context cannot be trusted
            return False

    def close(self) -> None:
        self.monitor.close()
