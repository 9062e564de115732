"""W4A8 on an SM90 GPU (marker `gpu`; skipped without one): MXFP4 weights x e4m3 activations with
per-token scales, against the float64 reference in its `fp8` mode (the same activation quantization
and the same e4m3-folded weights, then exact arithmetic).

Every shipped model, an odd K and an EP rank (tests/gpu_variants.py, W4A8_VARIANTS), T from 0 to
4096, skewed routing, every built kernel, both entry points, CUDA-graph replay and batch invariance.
Fresh random inputs per case (the seed is in pytest's header), outputs poisoned first.  Each case
also prints the error against the exact layer (BF16 activations, unfolded MXFP4 weights): what W4A8
costs a user.
"""
import os

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an SM90 (compute capability 9.0) GPU", allow_module_level=True)

from gpu_variants import W4A8_VARIANTS, assert_batch_invariant, every_kernel_pair, layer_and_weights  # noqa: E402
from moegen.sass import ptxas_findings  # noqa: E402
from moegen.testing import random_inputs, random_weights, reference_output, tolerance  # noqa: E402

TOKENS = (0, 1, 2, 3, 8, 9, 33, 255, 500, 1024, 4096)  # 8 | 9: one-block | many-block routing
# Against the fp8 reference: moegen.testing.tolerance (1e-2; wider below 16 output rows, where one
# row's error is a handful of flipped `h` elements: FP8 wgmma adds its products at reduced precision,
# about 2e-4 relative on GEMM1 with each K tile's partial sums promoted to fp32, and re-quantizing `h`
# to e4m3 turns that into whole e4m3 steps on the few elements it moves across a rounding boundary).
# Measured 1.9e-3 - 8.5e-3 over every shipped model (H200, T <= 2 pooled; medians 3.6-3.7e-3; 1.2-1.4e-2 without the promotion).  A layout or scale error is O(1).
# Up to SMALL_T tokens the error is pooled over SMALL_T_DRAWS fresh draws, each a poisoned call of its
# own, and bounded for the rows pooled.
SMALL_T = 2
SMALL_T_DRAWS = 4
# Against the exact layer: e4m3's three mantissa bits on both activations: 4.3-4.8e-2 measured
# (moegen.fp8: 4.3-4.7e-2 simulated for random weights).
EXACT_BOUND = 5.5e-2
_SEED = int(os.environ["MOEGEN_TEST_SEED"])

def _layer(variant):
    layer, w = layer_and_weights(variant, _SEED)
    assert layer.manifest.activation_format == "fp8"
    return layer, w


def check(variant, T, skew=False, kernels=None, seed_offset=0):
    layer, w = _layer(variant)
    spec = layer.spec
    squares = {"fp8": [0.0, 0.0], "exact": [0.0, 0.0]}  # per reference: sum |out - ref|^2, sum |ref|^2
    draws = SMALL_T_DRAWS if 0 < T <= SMALL_T else 1
    for draw in range(draws):
        x = random_inputs(spec, T, "cuda", _SEED + 1000 * T + seed_offset + 7 * skew + 100003 * draw, skew=skew)
        res = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=kernels, poison=True)
        torch.cuda.synchronize()
        assert res.out.shape == (T, spec.hidden_size) and res.out.dtype == torch.bfloat16
        if T == 0:
            return
        assert not torch.isnan(res.out).any(), "output has NaN (unwritten or non-finite elements)"
        for name, fmt in (("fp8", "fp8"), ("exact", "bf16")):
            ref = reference_output(spec, w, x, res.topk_ids, fmt).double()
            squares[name][0] += (res.out.double() - ref).square().sum().item()
            squares[name][1] += ref.square().sum().item()
    err, exact = ((d / r) ** 0.5 if r > 0 else d ** 0.5 for d, r in squares.values())
    pooled = f" (pooled over {draws} draws)" if draws > 1 else ""
    print(f"{variant} T={T} skew={skew} kernels={kernels}: rel L2 {err:.2e} against the fp8 reference, "
          f"{exact:.2e} against the exact layer{pooled}")
    bound = tolerance("fp8", T * draws)
    assert err <= bound, f"{variant} T={T}: relative L2 error {err:.3e} > {bound:.3e}"
    assert exact <= EXACT_BOUND, f"{variant} T={T}: {exact:.3e} against the exact layer"


@pytest.mark.parametrize("T", TOKENS)
@pytest.mark.parametrize("variant", list(W4A8_VARIANTS))
def test_w4a8_layer_matches_reference(variant, T):
    check(variant, T)


@pytest.mark.parametrize("T", (1, 4, 1024))  # 1, 4: the `h` quantizer and GEMM2 follow GEMM1 per expert
@pytest.mark.parametrize("variant", ["deepseek-v4-flash-w4a8", "qwen3-30b-a3b-ep1of4-w4a8"])
def test_w4a8_skewed_routing(variant, T):
    check(variant, T, skew=True)


@pytest.mark.parametrize("variant", ["deepseek-v4-flash-w4a8", "gpt-oss-20b-tp2-w4a8"])
def test_every_w4a8_kernel_is_correct(variant):
    layer, _ = _layer(variant)
    for a, b in every_kernel_pair(layer):
        for T in (5, 300, 700):  # 700: over 4096 rows on DeepSeek-V4-Flash, the tile loops' persistent grid
            check(variant, T, kernels=(a, b), seed_offset=a)


@pytest.mark.parametrize("variant", W4A8_VARIANTS)
def test_w4a8_kernels_compiled_without_spills(variant):
    """As for BF16: no spill and no unexpected wgmma serialization (a 140-byte spill in
    m256n64k128s4_fp8 changed no output bit, only the time)."""
    layer, _ = _layer(variant)
    assert [line for line, fails in ptxas_findings(layer.manifest) if fails] == []


@pytest.mark.parametrize("T", (1, 4, 64, 1024))
def test_w4a8_entry_points_and_cuda_graph_replay(T):
    layer, w = _layer("gpt-oss-120b-w4a8")
    x = random_inputs(layer.spec, T, "cuda", _SEED + 29)
    fused = layer(x.hidden, x.logits, w.prepared)
    experts = layer.experts(x.hidden, fused.topk_ids, fused.topk_weights, w.prepared, poison=True)
    assert torch.equal(experts, fused.out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_fused = layer(x.hidden, x.logits, w.prepared)
    for _ in range(2):  # the second replay starts from the first one's per-expert counters
        g_fused.out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(g_fused.out, fused.out)


@pytest.mark.parametrize("variant", W4A8_VARIANTS)
def test_w4a8_batch_invariance(variant):
    """Per-token scales and a fixed K order per output: a token's output is bitwise the same alone
    and inside larger batches, whichever kernels the size picks: every bucket of the shipped table and
    the token count just past it (the shipped tables' full-width tile loops: DeepSeek-V4-Flash's GEMM2
    at 16384, Qwen3-30B-A3B's GEMM1 from 1024)."""
    layer, w = _layer(variant)
    assert layer.dispatch is not None, "the tests' build has the shipped table's kernels: it should dispatch by it"
    edges = [t for t in layer.dispatch.tokens if t <= 16384]
    sizes = sorted({8, 64, 512, 4096, 16384, *edges, *(t + 1 for t in edges if t < 16384)})
    assert_batch_invariant(layer, w, sizes, _SEED + 31)


def test_bf16_weights_are_refused_by_a_w4a8_library():
    layer, _ = _layer("gpt-oss-20b-w4a8")
    other = random_weights(layer.spec, "cuda", _SEED, "sm90_e2m1_atom64")
    x = random_inputs(layer.spec, 2, "cuda", _SEED)
    with pytest.raises(ValueError, match="layout"):
        layer(x.hidden, x.logits, other.prepared)


def test_a_w4a8_library_refuses_batched_calls():
    """W4A8 quantizes its hidden rows per token inside the routing: the batched layout is the BF16
    libraries' (moegen_max_tokens_per_expert() is 0), refused before any launch."""
    layer, w = _layer("gpt-oss-120b-w4a8")
    spec = layer.spec
    assert layer.library.max_tokens_per_expert == 0
    hidden = torch.zeros((spec.local_experts, 4, spec.hidden_size), dtype=torch.bfloat16, device="cuda")
    counts = torch.zeros((spec.local_experts,), dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="takes no batched calls"):
        layer.experts_batched(hidden, counts, w.prepared, num_tokens=4)
