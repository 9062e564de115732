"""The GPU tests' model variants, their kernels and build folder: importable without a GPU, so the
tests' libraries can be built on any machine (and carried to a GPU one).
MOEGEN_TEST_KERNELS=gemm1,gemm2 (one tile each, e.g. m64n16k64s6,m64n16k64s6) builds every variant with
just those tiles (where they fit; the fallback kernels elsewhere): a quick first look on a new GPU.
MOEGEN_TEST_KERNELS=default builds what `moegen build` ships for each variant (a change to every
kernel, tested without compiling the whole shortlist)."""
import os
from pathlib import Path

from moegen.arch import get_arch
from moegen.build import OBJECT_STORE
from moegen.paths import DEFAULT_OUT
from moegen.naming import KernelConfig, parse_kernel_name
from moegen.dispatch import table_kernels
from moegen.kernel_sets import default_kernels
from moegen.problem import ProblemKey, gemm_shapes
from moegen.spec import ModelSpec, load_model

OUT = DEFAULT_OUT / "_gputest"  # the tests' own builds, apart from what users build and tune
STORE = DEFAULT_OUT / OBJECT_STORE  # ...sharing their objects: the shortlist is also what `tune` times
VARIANTS = {
    "deepseek-v4-flash": dict(),
    "deepseek-v3": dict(),
    "gpt-oss-120b": dict(),
    "gpt-oss-20b": dict(),
    "qwen3-30b-a3b": dict(),
    "gpt-oss-20b-tp2": dict(model="gpt-oss-20b", tp_size=2),  # I_local 1440: K not a multiple of 64
    "gpt-oss-120b-tp2": dict(model="gpt-oss-120b", tp_size=2),
    "qwen3-30b-a3b-ep1of4": dict(model="qwen3-30b-a3b", ep_size=4, ep_rank=1),
    "deepseek-v4-flash-ep1of8": dict(model="deepseek-v4-flash", ep_size=8, ep_rank=1),
    "deepseek-v3-ep1of8": dict(model="deepseek-v3", ep_size=8, ep_rank=1),
}
# Test-only specs: their routing is the point, so they get the fallback kernels only.
ROUTING_VARIANTS = {
    # groups of 8 experts: routing's shared-memory group scores (the models above score by registers)
    "grouped-64e": dict(model=str(Path(__file__).parent / "specs" / "grouped-64e.yaml")),
}
VARIANTS.update(ROUTING_VARIANTS)
# W4A8 (e4m3 activations): every shipped model, an odd K (gpt-oss-20b-tp2: 1440, padded to 1536) and
# an EP rank, each with its fp8 fallback kernels and its shipped table's picks (tests/test_gpu_w4a8.py).
W4A8_VARIANTS = {
    "deepseek-v4-flash-w4a8": dict(model="deepseek-v4-flash"),
    "deepseek-v3-w4a8": dict(model="deepseek-v3"),
    "gpt-oss-120b-w4a8": dict(model="gpt-oss-120b"),
    "gpt-oss-20b-w4a8": dict(model="gpt-oss-20b"),
    "qwen3-30b-a3b-w4a8": dict(model="qwen3-30b-a3b"),
    "gpt-oss-20b-tp2-w4a8": dict(model="gpt-oss-20b", tp_size=2),
    "gpt-oss-120b-tp2-w4a8": dict(model="gpt-oss-120b", tp_size=2),
    "qwen3-30b-a3b-ep1of4-w4a8": dict(model="qwen3-30b-a3b", ep_size=4, ep_rank=1),
    "deepseek-v4-flash-ep1of8-w4a8": dict(model="deepseek-v4-flash", ep_size=8, ep_rank=1),
    "deepseek-v3-ep1of8-w4a8": dict(model="deepseek-v3", ep_size=8, ep_rank=1),
}


def variant_spec(variant: str) -> ModelSpec:
    v = dict(VARIANTS[variant] if variant in VARIANTS else W4A8_VARIANTS[variant])
    spec = load_model(v.pop("model", variant))
    spec = spec.with_parallel(**v) if v else spec
    return spec.with_activations("fp8") if variant in W4A8_VARIANTS else spec


def gpu_test_configs(variant: str) -> list[KernelConfig]:
    """The arch's tuning shortlist (it holds every mainloop variant: one, two or four 64-row slices,
    one or two CTAs per SM, block_k 64 and 128) and the kernels the shipped tables pick, so the tests
    dispatch as a default build does; the fallback kernels for routing-only specs."""
    sm90, spec = get_arch("sm90"), variant_spec(variant)
    if variant in W4A8_VARIANTS:  # the picks: batch invariance then crosses the shipped buckets' kernels
        picked, _ = table_kernels("sm90", ProblemKey.of(spec))
        return sorted(set(get_arch("sm90", "fp8").fallback_configs(spec)) | set(picked))
    if variant in ROUTING_VARIANTS:
        return sm90.fallback_configs(spec)
    tiles = os.environ.get("MOEGEN_TEST_KERNELS")
    if tiles == "default":
        return default_kernels(spec, "sm90")
    if tiles:
        quick = []
        for gemm, tile in zip(("gemm1", "gemm2"), tiles.split(",")):
            c = parse_kernel_name(f"moegen_sm90_{gemm}_{tile}")
            quick.append(c if sm90.rejection_reason(c, gemm_shapes(spec)[gemm]) is None else
                         next(f for f in sm90.fallback_configs(spec) if f.gemm == gemm))
        return quick
    picked, _ = table_kernels("sm90", ProblemKey.of(spec))
    return sorted(set(sm90.shortlist_configs(spec)) | set(picked))


# --- shared by the GPU test modules (call these only with an SM90 GPU) -----------------------------------

_layers, _weights = {}, {}


def layer_and_weights(variant: str, seed: int):
    """The variant's library (built under OUT, or up to date) and random weights in its layout; one
    model's weights stay on the GPU at a time, shared by every GPU test module."""
    from moegen.build import build
    from moegen.runtime import load
    from moegen.testing import random_weights
    if variant not in _layers:
        spec = variant_spec(variant)
        build(spec, "sm90", gpu_test_configs(variant), OUT, log=lambda m: None, store=STORE)
        _layers[variant] = load(OUT / spec.variant / "sm90", spec=spec)
    if variant not in _weights:
        _weights.clear()
        _weights[variant] = random_weights(_layers[variant].spec, "cuda", seed, _layers[variant].weight_layout)
    return _layers[variant], _weights[variant]


def every_kernel_pair(layer) -> list[tuple[int, int]]:
    """(gemm1, gemm2) kernel indices that run every kernel of both GEMMs at least once, the GEMM2
    list reversed so that pairs vary."""
    g1 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm1"]
    g2 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm2"][::-1]
    return [(g1[i % len(g1)], g2[i % len(g2)]) for i in range(max(len(g1), len(g2)))]


def assert_batch_invariant(layer, w, sizes, seed: int) -> None:
    """Eight tokens computed alone, then inside batches of each size (the rest filled with other
    tokens): their outputs must be bitwise the same, whichever kernels each size dispatches to."""
    import torch
    from moegen.testing import random_inputs
    big = random_inputs(layer.spec, max(sizes), "cuda", seed)
    probe = list(range(0, max(sizes), max(sizes) // 8))[:8]
    alone = [layer(big.hidden[t:t + 1].contiguous(), big.logits[t:t + 1].contiguous(), w.prepared,
                   big.score_bias).out for t in probe]
    everyone = torch.arange(max(sizes), device="cuda")
    for T in sizes:
        idx = torch.tensor(probe, device="cuda")[:T]
        rows = torch.cat([idx, everyone[~torch.isin(everyone, idx)]])[:T]
        res = layer(big.hidden[rows].contiguous(), big.logits[rows].contiguous(), w.prepared, big.score_bias)
        for j, t in enumerate(probe[:min(T, len(probe))]):
            assert torch.equal(res.out[j], alone[j][0]), f"token {t} differs inside T={T} ({layer.choose_kernels(T)})"
