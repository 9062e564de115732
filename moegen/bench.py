"""Layer benchmark: CUDA-graph replay, median of many runs, against the floor measured in the same run.

floor = max(weight bytes of the experts hit / measured read bandwidth,
            FLOPs / measured bf16 tensor-core rate).
Inputs rotate over several sets (different tokens, so different experts), so L2 does not flatter
small batches by keeping one set's experts resident.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass

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
    rows = []
    for T in tokens:
        k1, k2 = layer.choose_kernels(T)
        sets = input_set_graphs(layer, w, T, (k1, k2), rotations, seed)
        hit = []
        for _, _, topk_ids in sets:
            ids = topk_ids.long()
            local = ids[(ids >= spec.expert_begin) & (ids < spec.expert_begin + spec.local_experts)]
            hit.append(local.unique().numel())
        times = sorted(replay_times_us([g for g, _, _ in sets], reps))
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
        rows.append(row)
    return rows


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


def markdown_table(rows: list[BenchRow]) -> str:
    # p10-p90: replays of one input set spread 8-20 % at large T (tools/bench_sets.py), so the spread is shown.
    lines = ["| T | moegen µs (median) | p10-p90 µs | floor µs | time / floor | TB/s | TFLOP/s | kernels |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.tokens} | {r.median_us:.1f} | {r.p10_us:.1f}-{r.p90_us:.1f} | {r.floor_us:.1f} | "
                     f"{r.time_over_floor:.2f} | {r.achieved_tbs:.2f} | {r.achieved_tflops:.1f} | {r.kernels} |")
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
