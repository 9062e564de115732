"""Layer benchmark: CUDA-graph replay at steady state, medians, against the floor measured in the same run.

floor = max(weight bytes of the experts hit / measured read bandwidth,
            FLOPs / measured bf16 tensor-core rate).
Inputs rotate over several sets (different tokens, so different experts), so L2 does not flatter
small batches by keeping one set's experts resident.  The GPU is first warmed to the clock and power
it serves at (the heaviest T, back to back), each T's replays run back to back with no host sync
between them, and each row records the SM clock, board power, share of samples at the power cap and
the energy per layer call over its replays.  Several libraries (the default build and a freshly
tuned full space, say) are benchmarked in one run, interleaved per T.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

from .artifact import source_commit
from .gpu_monitor import GpuMonitor
from .profiler import capture, pooled, replay_back_to_back, timing_pool, warm_up
from .runtime import MoeLayer, benchmark_switches, driver_version
from .spec import ModelSpec
from .testing import Weights, random_inputs, random_weights


@dataclass
class Ceilings:
    read_tbs: float
    bf16_tflops: float


@dataclass
class BenchRow:
    library: str  # label of the library benchmarked
    tokens: int
    kernels: str
    time_us: float  # the mean over the input sets of each set's median replay (profiler.mean_of_draw_medians)
    p10_us: float
    p90_us: float
    weight_bytes: float  # mean over the input sets
    flops: float
    floor_us: float
    time_over_floor: float
    achieved_tbs: float
    achieved_tflops: float
    sm_mhz_min: float | None = None
    sm_mhz_median: float | None = None
    power_w_median: float | None = None
    power_capped_share: float | None = None
    joules_per_call: float | None = None


def _median_time_ms(fn, reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def measure_ceilings(device="cuda") -> Ceilings:
    x = torch.empty(1 << 30, dtype=torch.float32, device=device).normal_()  # 4 GiB read per sum
    ms = _median_time_ms(lambda: torch.sum(x), 20)
    read_tbs = x.numel() * 4 / (ms * 1e-3) / 1e12
    del x
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    ms = _median_time_ms(lambda: torch.matmul(a, b, out=c), 20)
    return Ceilings(read_tbs=read_tbs, bf16_tflops=2 * n**3 / (ms * 1e-3) / 1e12)


def expert_bytes(spec: ModelSpec) -> int:
    """Weight bytes of one local expert as stored by a checkpoint: e2m1 values plus e8m0 scales."""
    params = 3 * spec.hidden_size * spec.local_intermediate
    return params // 2 + params // 32


@dataclass
class _InputSets:
    graphs: list
    inputs: list
    experts_hit: float


def input_sets(layer: MoeLayer, w: Weights, T: int, kernels: tuple[int, int], rotations: int, seed: int) -> _InputSets:
    """The benchmark's input sets for T (seeds seed + 100 T + r), each run once (warm-up; it also
    allocates) and captured in a CUDA graph."""
    spec = layer.spec
    graphs, inputs, hit = [], [], []
    for r in range(rotations):
        x = random_inputs(spec, T, "cuda", seed + 100 * T + r)
        res = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=kernels)
        ids = res.topk_ids.long()
        local = ids[(ids >= spec.expert_begin) & (ids < spec.expert_begin + spec.local_experts)]
        hit.append(local.unique().numel())
        graphs.append(capture(layer, w, x, kernels, timing_pool()))
        inputs.append(x)
    torch.cuda.synchronize()
    return _InputSets(graphs, inputs, statistics.mean(hit))


def bench_layers(layers: dict[str, MoeLayer], tokens: list[int], ceilings: Ceilings, reps: int = 30,
                 rotations: int = 8, seed: int = 0, warm_seconds: float = 5.0, min_seconds: float = 0.3,
                 rounds: int = 4, settle_seconds: float = 0.2, log=print) -> list[BenchRow]:
    """Rows for every (T, library), all on one set of weights and inputs per T.  The libraries must
    build the same spec.  Per T they take turns in `rounds` windows each, in the order A B, B A, A B,
    ...: one window per library drifted with the power state (two builds of the same kernels differed
    by 5 % at T = 64 on the H200), alternating windows share the drift.  Before the windows of a T,
    every library's graphs replay for settle_seconds: capturing them idles the GPU, and the first
    window after that ran at a boost clock the others did not get."""
    # One model: the libraries may differ in activation precision (W4A16 against W4A8) and then
    # get the same raw weights prepared in each one's layout.
    specs = {label: {k: v for k, v in layer.spec.to_dict().items() if k != "activations"}
             for label, layer in layers.items()}
    if len({str(s) for s in specs.values()}) != 1:
        raise ValueError(f"bench: the libraries build different specs: {sorted(specs)}")
    first = next(iter(layers.values()))
    spec = first.spec
    prepared = {}
    for layer in layers.values():
        if layer.weight_layout not in prepared:
            prepared[layer.weight_layout] = random_weights(layer.spec, "cuda", seed, layer.weight_layout)
    weights = {label: prepared[layer.weight_layout] for label, layer in layers.items()}
    w = weights[next(iter(layers))]
    monitor = GpuMonitor()
    rows = []
    try:
        if warm_seconds > 0 and tokens:
            heavy = max(tokens)
            warm_up(input_sets(first, w, heavy, first.choose_kernels(heavy), 2, seed).graphs, warm_seconds)
        for T in tokens:
            sets = {label: input_sets(layer, weights[label], T, layer.choose_kernels(T), rotations, seed)
                    for label, layer in layers.items()}
            if settle_seconds > 0:
                warm_up([g for s in sets.values() for g in s.graphs], settle_seconds)
            windows: dict[str, list] = {label: [] for label in layers}
            order = list(layers)
            for r in range(rounds):
                for label in (order if r % 2 == 0 else order[::-1]):
                    windows[label].append(replay_back_to_back(sets[label].graphs, reps, min_seconds, monitor))
            for label, layer in layers.items():
                timing = pooled(windows[label], monitor)
                rows.append(_row(label, layer, spec, T, layer.choose_kernels(T), sets[label], timing, ceilings))
                r = rows[-1]
                log(f"{label:>12} T={T:6d}  {r.time_us:9.1f} us  floor {r.floor_us:8.1f} us  x{r.time_over_floor:5.2f}"
                    f"  {r.sm_mhz_median or 0:5.0f} MHz  {r.power_w_median or 0:4.0f} W  [{r.kernels}]")
            del sets
    finally:
        monitor.close()
    return rows


def _row(label, layer: MoeLayer, spec: ModelSpec, T: int, kernels, sets: _InputSets, timing, ceilings) -> BenchRow:
    times = sorted(timing.times_us)
    us = timing.us
    wbytes = sets.experts_hit * expert_bytes(spec)
    local_slots = T * spec.top_k * spec.local_experts / spec.num_experts
    flops = 2 * local_slots * 3 * spec.hidden_size * spec.local_intermediate
    floor = max(wbytes / (ceilings.read_tbs * 1e12), flops / (ceilings.bf16_tflops * 1e12)) * 1e6
    p = timing.power
    joules = p.energy_j / len(times) if p.energy_j is not None and times else None
    k1, k2 = kernels
    return BenchRow(label, T, f"{layer.kernels[k1].name},{layer.kernels[k2].name}", us, times[len(times) // 10],
                    times[len(times) * 9 // 10], wbytes, flops, floor, us / floor if floor else 0.0,
                    wbytes / (us * 1e-6) / 1e12, flops / (us * 1e-6) / 1e12, p.sm_mhz_min, p.sm_mhz_median,
                    p.power_w_median, p.power_capped_share, joules)


def environment(device: torch.device | int | None = None) -> dict:
    props = torch.cuda.get_device_properties(torch.cuda.current_device() if device is None else device)
    return dict(gpu=props.name, sm_count=props.multi_processor_count, driver=driver_version(), cuda=torch.version.cuda,
                torch=torch.__version__, date=time.strftime("%Y-%m-%d"), commit=source_commit(),
                benchmark_switches=benchmark_switches())


def _cell(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def markdown_table(rows: list[BenchRow]) -> str:
    lines = ["| library | T | µs (draws' mean) | p10-p90 µs | floor µs | × floor | TB/s | TFLOP/s | SM MHz (min-median) "
             "| W | at power cap | mJ / call | kernels |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        capped = "-" if r.power_capped_share is None else f"{100 * r.power_capped_share:.0f} %"
        mhz = "-" if r.sm_mhz_min is None else f"{r.sm_mhz_min:.0f}-{r.sm_mhz_median:.0f}"
        mj = "-" if r.joules_per_call is None else f"{1e3 * r.joules_per_call:.2f}"
        lines.append(f"| {r.library} | {r.tokens} | {r.time_us:.1f} | {r.p10_us:.1f}-{r.p90_us:.1f} | "
                     f"{r.floor_us:.1f} | {r.time_over_floor:.2f} | {r.achieved_tbs:.2f} | {r.achieved_tflops:.1f} | "
                     f"{mhz} | {_cell(r.power_w_median, '.0f')} | {capped} | {mj} | {r.kernels} |")
    return "\n".join(lines)


def to_json(rows: list[BenchRow], ceilings: Ceilings, spec: ModelSpec, command: str = "") -> dict:
    return dict(environment=environment(), model=spec.variant, command=command, ceilings=asdict(ceilings),
                rows=[asdict(r) for r in rows])
