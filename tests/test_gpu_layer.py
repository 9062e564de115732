"""The fused layer on an SM90 GPU against the float64 reference (marker `gpu`; skipped without one).

Builds (or reuses, by fingerprint) generated/<variant>/sm90 for each variant, draws fresh random
inputs per case, poisons outputs and workspace, and checks relative L2 error <= 1e-2, no NaN, and
the router's choice against the reference router wherever the choice is not a near tie.
"""
import os
import random
from dataclasses import replace

import pytest
import torch

from moegen import reference

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an SM90 (compute capability 9.0) GPU", allow_module_level=True)

from gpu_variants import OUT, VARIANTS, gpu_test_configs, variant_spec  # noqa: E402
from moegen.build import build  # noqa: E402
from moegen.runtime import load  # noqa: E402
from moegen.testing import random_inputs, random_weights, reference_output, relative_l2  # noqa: E402

TOKENS = (0, 1, 2, 3, 7, 16, 32, 33, 64, 255, 1024, 4096)  # 32 | 33: one-block | many-block routing
TOLERANCE = 1e-2
MARGIN = 1e-5  # router choices closer than this may flip under float32 rounding
_SEED = int(os.environ.get("MOEGEN_TEST_SEED", random.randrange(1 << 30)))


_layers, _weights = {}, {}


def _layer(variant):
    if variant not in _layers:
        spec = variant_spec(variant)
        build(spec, "sm90", gpu_test_configs(spec), OUT, log=lambda m: None)
        _layers[variant] = load(OUT / spec.variant / "sm90", spec=spec)
    if variant not in _weights:
        _weights.clear()  # one model's weights on the GPU at a time
        _weights[variant] = random_weights(_layers[variant].spec, "cuda", _SEED)
    return _layers[variant], _weights[variant]


def check(variant, T, skew=False, kernels=None, seed_offset=0, bf16_logits=False):
    layer, w = _layer(variant)
    spec = layer.spec
    x = random_inputs(spec, T, "cuda", _SEED + 1000 * T + seed_offset + 7 * skew, skew=skew)
    logits = x.logits
    if bf16_logits:  # the layer reads bf16 logits; the reference gets the same values in float32
        logits = x.logits.to(torch.bfloat16)
        x = replace(x, logits=logits.float())
    res = layer(x.hidden, logits, w.prepared, x.score_bias, kernels=kernels, poison=True)
    torch.cuda.synchronize()
    assert res.out.shape == (T, spec.hidden_size) and res.out.dtype == torch.bfloat16
    if T == 0:
        return 0.0
    assert not torch.isnan(res.out).any(), "output has NaN (unwritten or non-finite elements)"
    ref_route = reference.route(spec, x.logits, x.score_bias)
    decided = ref_route.margin > MARGIN
    mine = torch.sort(res.topk_ids.long(), dim=1).values
    theirs = torch.sort(ref_route.ids, dim=1).values
    assert torch.equal(mine[decided], theirs[decided]), "expert choice differs from the reference router"
    torch.testing.assert_close(res.topk_weights.double(),
                               reference.route_weights(spec, x.logits, x.score_bias, res.topk_ids.long()),
                               rtol=1e-4, atol=1e-5)
    err = relative_l2(res.out, reference_output(spec, w, x, res.topk_ids))
    print(f"{variant} T={T} skew={skew} kernels={kernels}: rel L2 {err:.2e}")
    assert err <= TOLERANCE, f"{variant} T={T}: relative L2 error {err:.3e} > {TOLERANCE}"
    return err


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_layer_matches_reference(variant, T):
    check(variant, T)


@pytest.mark.parametrize("T", (1, 1024))
@pytest.mark.parametrize("variant", ["deepseek-v4-flash", "gpt-oss-120b", "qwen3-30b-a3b-ep1of4"])
def test_skewed_routing(variant, T):
    check(variant, T, skew=True)


@pytest.mark.parametrize("T", (3, 33, 1024))  # one-block routing | many blocks | scatter kernel
@pytest.mark.parametrize("variant", ["deepseek-v4-flash", "gpt-oss-20b", "qwen3-30b-a3b", "grouped-64e"])
def test_bf16_router_logits(variant, T):
    check(variant, T, bf16_logits=True)


@pytest.mark.parametrize("variant", ["deepseek-v4-flash", "gpt-oss-20b-tp2"])
def test_every_kernel_is_correct(variant):
    """Each built kernel, not just the one the heuristic picks, at a decode and a prefill size."""
    layer, _ = _layer(variant)
    g1 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm1"]
    g2 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm2"]
    g2.reverse()
    for i in range(max(len(g1), len(g2))):  # every kernel of both GEMMs runs at least once
        a, b = g1[i % len(g1)], g2[i % len(g2)]
        for T in (5, 300):
            check(variant, T, kernels=(a, b), seed_offset=a)


@pytest.mark.parametrize("T", (64, 1024))  # 1024: 6144 expert rows, the persistent grid
def test_cuda_graph_replay(T):
    layer, w = _layer("deepseek-v4-flash")
    spec = layer.spec
    x = random_inputs(spec, T, "cuda", _SEED + 5)
    static = [x.hidden.clone(), x.logits.clone(), x.score_bias.clone()]
    layer(*static[:2], w.prepared, static[2])  # warm-up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        res = layer(*static[:2], w.prepared, static[2])
    for seed in (11, 12):
        y = random_inputs(spec, T, "cuda", _SEED + seed)
        for buf, new in zip(static, (y.hidden, y.logits, y.score_bias)):
            buf.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        eager = layer(y.hidden, y.logits, w.prepared, y.score_bias)
        assert torch.equal(res.out, eager.out), "graph replay differs from eager"


def test_input_checks():
    layer, w = _layer("deepseek-v4-flash")
    spec = layer.spec
    x = random_inputs(spec, 4, "cuda", _SEED)
    with pytest.raises(ValueError, match="hidden_states: dtype torch.float32, expected torch.bfloat16"):
        layer(x.hidden.float(), x.logits, w.prepared, x.score_bias)
    with pytest.raises(ValueError, match=r"router_logits: shape \(4, 255\), expected \(4, 256\)"):
        layer(x.hidden, x.logits[:, :255].contiguous(), w.prepared, x.score_bias)
    with pytest.raises(ValueError, match="router_logits: not contiguous"):
        layer(x.hidden, x.logits.t().contiguous().t(), w.prepared, x.score_bias)
    with pytest.raises(ValueError, match="score_bias: required"):
        layer(x.hidden, x.logits, w.prepared, None)
    with pytest.raises(ValueError, match="hidden_states: on cpu"):
        layer(x.hidden.cpu(), x.logits, w.prepared, x.score_bias)
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        buf = torch.empty(4 * spec.hidden_size + 1, dtype=torch.bfloat16, device="cuda")
        layer(buf[1:].view(4, spec.hidden_size), x.logits, w.prepared, x.score_bias)
    with pytest.raises(RuntimeError, match="gemm1_kernel = 99"):
        layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(99, 0))


def test_dispatch_table_is_used_and_missing_table_warns(tmp_path):
    """With no table for this GPU the runtime warns once and uses the heuristic; with one it follows it."""
    import json
    import shutil
    import warnings

    from moegen import tune

    layer, _ = _layer("qwen3-30b-a3b")
    copy = tmp_path / "qwen3"
    shutil.copytree(layer.out_dir, copy, ignore=shutil.ignore_patterns("obj", "src", "logs", "dispatch"))
    plain = load(copy, spec=layer.spec)
    tune._warned.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert plain.choose_kernels(1) == tune.heuristic_choice(plain.kernels, plain.spec, 1)
        plain.choose_kernels(4096)
    assert len([w for w in seen if "no dispatch table" in str(w.message)]) == 1
    g1 = [i for i, k in enumerate(plain.kernels) if k.gemm == "gemm1"]
    g2 = [i for i, k in enumerate(plain.kernels) if k.gemm == "gemm2"]
    # a table that picks the *non*-heuristic kernels, so following it is observable
    pick = (g1[-1], g2[0])
    choices = {1: (pick[0], pick[1], 1.0), 8: (g1[0], g2[-1], 2.0)}
    table = tune.make_table(plain.spec, "sm90", plain.manifest["fingerprint"], plain.gpu, plain.kernels, choices, [])
    tune.save_table(copy, table)
    tuned = load(copy, spec=layer.spec)
    assert tuned.dispatch is not None, tuned.dispatch_note
    assert tuned.choose_kernels(1) == pick and tuned.choose_kernels(5) == (g1[0], g2[-1])
    assert json.loads(tune.table_path(copy, tuned.gpu).read_text())["buckets"][0]["tokens"] == 1
