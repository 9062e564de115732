"""Layer benchmark: CUDA-graph replay, median of many runs, against the floor measured in the same run.

floor = max(weight bytes of the experts hit / measured read bandwidth,
            FLOPs / measured bf16 tensor-core rate).
Inputs rotate over several sets (different tokens, so different experts), so L2 does not flatter
small batches by keeping one set's experts resident.
"""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime

import torch

from .runtime import MoeLayer
from .spec import ModelSpec
from .testing import Weights, random_inputs, random_weights


@dataclass
class Ceilings:
    read_tbs: float
    bf16_tflops: float


@dataclass
class BenchRow:
    tokens: int
    kernels: str
    median_us: float
    p10_us: float
    p90_us: float
    weight_bytes: float  # mean over the input sets
    flops: float
    floor_us: float
    time_over_floor: float
    achieved_tbs: float
    achieved_tflops: float
    # nvidia-smi samples taken while the replays ran (None without samples): large T reaches the
    # power cap and runs at lower SM clocks than a tool that idles between replays (docs/benchmarks.md).
    sm_mhz_min: float | None = None
    sm_mhz_median: float | None = None
    power_capped_share: float | None = None  # samples whose clock-event reasons include the SW power cap


# nvidia-smi's clock-event reason bit for the software power cap (nvmlClocksEventReasonSwPowerCap).
SW_POWER_CAP = 0x4


CLOCK_QUERY = "timestamp,clocks.sm,clocks_event_reasons.active"


def parse_clock_sample(line: str) -> tuple[float, float, int] | None:
    """One CLOCK_QUERY line (csv, noheader, nounits), e.g. "2026/11/29 22:44:36.123, 1980,
    0x0000000000000004": (seconds since the epoch, SM MHz, clock-event reason bits).  nvidia-smi
    writes its local time, which datetime reads as local time too."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        return None
    try:
        return (datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(parts[1]),
                int(parts[2], 16))
    except ValueError:
        return None


def clock_summary(samples: list[tuple[float, int]]) -> dict:
    """The BenchRow clock fields of the samples taken during one T's replays."""
    if not samples:
        return dict(sm_mhz_min=None, sm_mhz_median=None, power_capped_share=None)
    mhz = [m for m, _ in samples]
    capped = sum(1 for _, reasons in samples if reasons & SW_POWER_CAP)
    return dict(sm_mhz_min=min(mhz), sm_mhz_median=statistics.median(mhz), power_capped_share=capped / len(samples))


class ClockSampler:
    """Samples the GPU's SM clock and clock-event reasons with `nvidia-smi -lms` in the background.
    After close(), window(t0, t1) gives the samples nvidia-smi stamped between two time.time()
    instants (its output may arrive in blocks through the pipe, so samples are matched by its own
    timestamps once it has exited).  Without nvidia-smi, or on any error, there are no samples: the
    benchmark never fails because of it."""

    def __init__(self, interval_ms: int = 20):
        self.samples: list[tuple[float, float, int]] = []
        self._proc = None
        self._thread = None
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
        try:
            self._proc = subprocess.Popen(
                ["nvidia-smi", "-i", gpu, f"--query-gpu={CLOCK_QUERY}",
                 "--format=csv,noheader,nounits", "-lms", str(interval_ms)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except (OSError, ValueError):
            return
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self._proc.stdout:
                sample = parse_clock_sample(line)
                if sample is not None:
                    self.samples.append(sample)
        except (OSError, ValueError):
            pass

    def window(self, t0: float, t1: float) -> list[tuple[float, int]]:
        return [(mhz, reasons) for t, mhz, reasons in self.samples if t0 <= t <= t1]

    def close(self) -> None:
        if self._proc is not None:
            try:  # SIGINT: nvidia-smi's loop exits and flushes what it buffered
                self._proc.send_signal(signal.SIGINT)
                self._proc.wait(timeout=5)
            except (OSError, subprocess.SubprocessError):
                try:
                    self._proc.kill()
                    self._proc.wait(timeout=5)
                except (OSError, subprocess.SubprocessError):
                    pass
        if self._thread is not None:
            self._thread.join(timeout=5)


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


def replay_times_us(graphs: list, reps: int) -> list[float]:
    """Each graph replayed once to warm up, then `reps` rounds over all of them (inputs rotate),
    each replay timed alone with CUDA events."""
    for g in graphs:
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        for g in graphs:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
    return times


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


def input_set_graphs(layer: MoeLayer, w: Weights, T: int, kernels: tuple[int, int], rotations: int, seed: int) -> list:
    """The benchmark's input sets for T (seeds seed + 100 T + r), each run once (warm-up; it also
    allocates) and captured in a CUDA graph: [(graph, inputs, topk_ids of the warm-up)].  The inputs
    stay alive with their graph.  tools/bench_sets.py times the same sets one by one."""
    sets = []
    for r in range(rotations):
        x = random_inputs(layer.spec, T, "cuda", seed + 100 * T + r)
        res = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=kernels)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=kernels)
        sets.append((g, x, res.topk_ids))
    return sets


def bench_layer(layer: MoeLayer, tokens: list[int], ceilings: Ceilings, reps: int = 30, rotations: int = 8,
                seed: int = 0, log=print) -> list[BenchRow]:
    spec = layer.spec
    w = random_weights(spec, "cuda", seed)
    rows, windows = [], []
    clocks = ClockSampler()
    try:
        for T in tokens:
            row, window = _bench_one(layer, w, T, ceilings, reps, rotations, seed, log)
            rows.append(row)
            windows.append(window)
    finally:
        clocks.close()
    return [replace(r, **clock_summary(clocks.window(t0, t1))) for r, (t0, t1) in zip(rows, windows)]


def _bench_one(layer: MoeLayer, w: Weights, T: int, ceilings: Ceilings, reps: int, rotations: int, seed: int,
               log) -> tuple[BenchRow, tuple[float, float]]:
    """One T's row, and the time.time() window of its timed replays (for the clock samples)."""
    spec = layer.spec
    k1, k2 = layer.choose_kernels(T)
    sets = input_set_graphs(layer, w, T, (k1, k2), rotations, seed)
    hit = []
    for _, _, topk_ids in sets:
        ids = topk_ids.long()
        local = ids[(ids >= spec.expert_begin) & (ids < spec.expert_begin + spec.local_experts)]
        hit.append(local.unique().numel())
    t0 = time.time()
    times = sorted(replay_times_us([g for g, _, _ in sets], reps))
    window = (t0, time.time())
    del sets
    med = statistics.median(times)
    wbytes = statistics.mean(hit) * expert_bytes(spec)
    local_slots = T * spec.top_k * spec.local_experts / spec.num_experts
    flops = 2 * local_slots * 3 * spec.hidden_size * spec.local_intermediate
    floor = max(wbytes / (ceilings.read_tbs * 1e12), flops / (ceilings.bf16_tflops * 1e12)) * 1e6
    row = BenchRow(T, f"{layer.kernels[k1].name},{layer.kernels[k2].name}", med, times[len(times) // 10],
                   times[len(times) * 9 // 10], wbytes, flops, floor, med / floor if floor else 0.0,
                   wbytes / (med * 1e-6) / 1e12, flops / (med * 1e-6) / 1e12)
    log(f"T={T:6d}  {med:9.1f} us  floor {floor:8.1f} us  x{row.time_over_floor:5.2f}  "
        f"{row.achieved_tbs:5.2f} TB/s  {row.achieved_tflops:6.1f} TFLOP/s  [{row.kernels}]")
    return row, window


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    commit = os.environ.get("MOEGEN_COMMIT")  # set by callers whose checkout has no .git (device runs)
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    timeout=10).stdout.strip() or "unknown"
        except (OSError, subprocess.SubprocessError):
            commit = "unknown"
    return dict(gpu=props.name, sm_count=props.multi_processor_count, driver=driver, cuda=torch.version.cuda,
                torch=torch.__version__, date=time.strftime("%Y-%m-%d"), commit=commit)


def _clock_cell(r: BenchRow) -> str:
    if r.sm_mhz_min is None:
        return "-"
    return f"{r.sm_mhz_min:.0f}-{r.sm_mhz_median:.0f} ({100 * r.power_capped_share:.0f} % capped)"


def markdown_table(rows: list[BenchRow]) -> str:
    # p10-p90: replays of one input set spread 8-20 % at large T (tools/bench_sets.py), so the spread is shown.
    # SM MHz: min-median of nvidia-smi samples during the replays, and the share at the software power cap.
    lines = ["| T | moegen µs (median) | p10-p90 µs | floor µs | time / floor | TB/s | TFLOP/s | SM MHz | kernels |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.tokens} | {r.median_us:.1f} | {r.p10_us:.1f}-{r.p90_us:.1f} | {r.floor_us:.1f} | "
                     f"{r.time_over_floor:.2f} | {r.achieved_tbs:.2f} | {r.achieved_tflops:.1f} | {_clock_cell(r)} | "
                     f"{r.kernels} |")
    return "\n".join(lines)


def to_json(rows: list[BenchRow], ceilings: Ceilings, spec: ModelSpec) -> dict:
    return dict(environment=environment(), model=spec.variant, ceilings=asdict(ceilings),
                rows=[asdict(r) for r in rows])


class LayerProfiler:
    """`moegen tune`'s profiler: (tokens, gemm1, gemm2) -> median µs of the whole layer by graph replay.

    Each config is first run once with poisoned outputs and checked against the float64 reference
    (computed once per token count); a config that fails to launch or to verify raises, which the
    tuner scores as infinity with the message as the reason.
    """

    def __init__(self, layer: MoeLayer, rotations: int = 4, reps: int = 5, seed: int = 0, tolerance: float = 2e-2):
        from .testing import random_weights
        self.layer, self.rotations, self.reps, self.seed, self.tolerance = layer, rotations, reps, seed, tolerance
        self.weights = random_weights(layer.spec, "cuda", seed)
        self.inputs: dict[int, list] = {}
        self.refs: dict[int, torch.Tensor] = {}

    def _inputs(self, tokens: int):
        if tokens not in self.inputs:
            self.inputs = {tokens: [random_inputs(self.layer.spec, tokens, "cuda", self.seed + 100 * tokens + r)
                                    for r in range(self.rotations)]}  # one bucket's inputs at a time
        return self.inputs[tokens]

    def __call__(self, tokens: int, gemm1: int, gemm2: int) -> float:
        from .testing import reference_output, relative_l2
        spec, w = self.layer.spec, self.weights
        xs = self._inputs(tokens)
        res = self.layer(xs[0].hidden, xs[0].logits, w.prepared, xs[0].score_bias, kernels=(gemm1, gemm2),
                         poison=True)
        torch.cuda.synchronize()
        if tokens not in self.refs:
            self.refs = {tokens: reference_output(spec, w, xs[0], res.topk_ids)}
        if torch.isnan(res.out).any():
            raise RuntimeError("verification failed: NaN in the output")
        err = relative_l2(res.out, self.refs[tokens])
        if err > self.tolerance:
            raise RuntimeError(f"verification failed: relative L2 error {err:.2e} > {self.tolerance}")
        graphs = []
        for x in xs:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(gemm1, gemm2))
            graphs.append(g)
        return statistics.median(replay_times_us(graphs, self.reps))
