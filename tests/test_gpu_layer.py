"""The layer on an SM90 GPU against the float64 reference (marker `gpu`; skipped without one).

Builds (or reuses, by fingerprint) each variant's library under generated/_gputest, draws fresh
random inputs per case (the seed is in pytest's header; MOEGEN_TEST_SEED repeats a run), poisons outputs and
workspace, and checks relative L2 error <= 2.7e-3 (as measured on these variants), no NaN, and the router's choice against the
reference router wherever the choice is not a near tie.  Both entry points: the fused layer and the
experts-only call on the caller's routing (with an expert map, int32 and int64 ids, a caller's
output buffer), and the batched call on rows grouped by local expert, under CUDA graphs and
torch.compile, T = 0, skewed routing, and batch invariance.
"""
import os
from dataclasses import replace

import pytest
import torch

from moegen import reference

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an SM90 (compute capability 9.0) GPU", allow_module_level=True)

from gpu_variants import VARIANTS, assert_batch_invariant, every_kernel_pair, layer_and_weights  # noqa: E402
from moegen.routing import hash_route  # noqa: E402
from moegen.runtime import load  # noqa: E402
from moegen.sass import ptxas_findings  # noqa: E402
from moegen import testing  # noqa: E402
from moegen.testing import random_inputs, reference_output, relative_l2  # noqa: E402

TOKENS = (0, 1, 2, 3, 7, 16, 32, 33, 64, 255, 500, 1024, 4096)  # 32 | 33: one-block | many-block routing
# Relative L2 error against the float64 layer on the variants here: rounding h (GEMM2's B operand) and
# the output to bf16 measured 2.25-2.47e-3 on every one (H200).  Tighter than moegen.testing's bound for
# any spec and split (5e-3), which must also pass splits with few intermediate columns per rank.
TOLERANCE = 2.7e-3
assert TOLERANCE <= testing.TOLERANCE["bf16"]
MARGIN = 1e-5  # router choices closer than this may flip under float32 rounding
_SEED = int(os.environ["MOEGEN_TEST_SEED"])  # tests/conftest.py draws it and prints it in the header

def _layer(variant):
    return layer_and_weights(variant, _SEED)


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


@pytest.mark.parametrize("T", (5, 40))  # one-block | many-block routing
@pytest.mark.parametrize("variant", ["deepseek-v3", "deepseek-v4-flash"])  # sigmoid | sqrt-softplus, renormalized
def test_tokens_whose_scores_underflow_get_zero_weights(variant, T):
    """A token whose every logit is far below zero has fp32 scores of 0: zero weights and a zero row,
    as the published models' own fp32 routing gives (and hash_route's clamp), not 0 / 0.  The other
    tokens are unaffected."""
    layer, w = _layer(variant)
    x = random_inputs(layer.spec, T, "cuda", _SEED + 11 * T + 3)
    logits = x.logits.clone()
    logits[1::2] = -200.0
    res = layer(x.hidden, logits, w.prepared, x.score_bias, poison=True)
    torch.cuda.synchronize()
    assert torch.isfinite(res.out).all() and torch.isfinite(res.topk_weights).all()
    assert (res.topk_weights[1::2] == 0).all() and (res.out[1::2] == 0).all()
    assert (res.topk_weights[0::2] > 0).all()
    whole = layer(x.hidden, x.logits, w.prepared, x.score_bias, poison=True)
    assert torch.equal(res.out[0::2], whole.out[0::2])  # batch invariance: the same rows, bit for bit


def test_signed_zero_logits_tie_and_the_lower_expert_wins():
    """gpt-oss selects on raw logits: -0 and +0 are equal there, as in the reference router."""
    layer, w = _layer("gpt-oss-20b")
    x = random_inputs(layer.spec, 1, "cuda", _SEED + 5)
    logits = torch.full_like(x.logits, -1.0)
    logits[0, [1, 2, 3]] = 1.0
    logits[0, 5], logits[0, 9] = -0.0, 0.0  # top-4: experts 1, 2, 3 and the lower of the tied pair
    res = layer(x.hidden, logits, w.prepared, x.score_bias, poison=True)
    assert torch.sort(res.topk_ids.long(), dim=1).values.tolist() == [[1, 2, 3, 5]]
    assert torch.sort(reference.route(layer.spec, logits, x.score_bias).ids, dim=1).values.tolist() == [[1, 2, 3, 5]]


@pytest.mark.parametrize("variant", ["deepseek-v4-flash", "gpt-oss-20b-tp2"])
def test_every_kernel_is_correct(variant):
    """Each built kernel, not just the one the dispatch picks, at a decode and a prefill size."""
    layer, _ = _layer(variant)
    for a, b in every_kernel_pair(layer):
        for T in (5, 300):
            check(variant, T, kernels=(a, b), seed_offset=a)


@pytest.mark.parametrize("variant", VARIANTS)
def test_kernels_compiled_without_spills(variant):
    """ptxas spilled nothing and serialized no wgmma the config space does not expect, in every kernel
    the tests built: a silent slowdown that no output comparison sees."""
    layer, _ = _layer(variant)
    assert [line for line, fails in ptxas_findings(layer.manifest) if fails] == []


@pytest.mark.parametrize("T", (64, 1024))  # 1024: 6144 expert rows, the many-block routing and scatter
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


def test_threads_on_their_own_streams_share_a_layer():
    """Each call takes its workspace from its own stream and the layer keeps no state between calls: two
    threads calling one layer at once, each on a stream of its own, get bit for bit what each call gives
    alone (one-block and many-block routing, the persistent grid at T = 700)."""
    import threading

    layer, w = _layer("deepseek-v4-flash")
    spec = layer.spec
    inputs = [random_inputs(spec, T, "cuda", _SEED + 40 + i) for i, T in enumerate((3, 700, 1, 64))]
    alone = [layer(x.hidden, x.logits, w.prepared, x.score_bias).out for x in inputs]
    torch.cuda.synchronize()
    results, errors = {}, []

    def worker(name, order):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                outs = [(i, layer(inputs[i].hidden, inputs[i].logits, w.prepared, inputs[i].score_bias,
                                  poison=True).out) for _ in range(5) for i in order]
            stream.synchronize()
            results[name] = outs
        except Exception as e:  # reported below, with the thread's name
            errors.append(f"{name}: {e!r}")

    threads = [threading.Thread(target=worker, args=("forward", (0, 1, 2, 3))),
               threading.Thread(target=worker, args=("backward", (3, 2, 1, 0)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for name, outs in results.items():
        for i, out in outs:
            assert torch.equal(out, alone[i]), f"{name}: T = {inputs[i].hidden.shape[0]} differs from the call alone"


# --- the experts-only entry point ---------------------------------------------------------------------

def _local_reference(spec, w, x, ids, weights):
    return reference.moe(spec, x.hidden, ids.long(), weights.double(), reference.MXFP4Experts(w.w13, w.s13),
                         reference.MXFP4Experts(w.w2, w.s2), w.b13, w.b2)


@pytest.mark.parametrize("T", (0, 1, 33, 1024))
@pytest.mark.parametrize("variant", ["qwen3-30b-a3b-ep1of4", "gpt-oss-120b", "deepseek-v4-flash-ep1of8"])
def test_experts_on_callers_routing(variant, T):
    """Global top-k ids (int32 and int64) and weights from the caller; slots on other ranks add zero."""
    layer, w = _layer(variant)
    spec = layer.spec
    g = torch.Generator(device="cuda").manual_seed(_SEED + T)
    x = random_inputs(spec, T, "cuda", _SEED + 3 * T)
    ids = torch.stack([torch.randperm(spec.num_experts, generator=g, device="cuda")[:spec.top_k] for _ in range(T)]) \
        if T else torch.empty((0, spec.top_k), dtype=torch.int64, device="cuda")
    if T:  # a token entirely off this rank, and (T > 1) one entirely on it
        ids[0] = (spec.expert_begin + spec.local_experts + torch.arange(spec.top_k, device="cuda")) % spec.num_experts
    if T > 1:
        ids[-1] = spec.expert_begin + torch.arange(spec.top_k, device="cuda") % spec.local_experts
    weights = torch.rand((T, spec.top_k), generator=g, device="cuda")
    ref = _local_reference(spec, w, x, ids, weights)
    for dtype in (torch.int32, torch.int64):
        out = layer.experts(x.hidden, ids.to(dtype), weights, w.prepared, poison=True)
        torch.cuda.synchronize()
        assert out.shape == (T, spec.hidden_size)
        if T:
            assert not torch.isnan(out).any()
            err = relative_l2(out, ref)
            print(f"experts {variant} T={T} {dtype}: rel L2 {err:.2e}")
            assert err <= TOLERANCE
            if spec.local_experts < spec.num_experts and not spec.gemm2_bias:
                assert torch.count_nonzero(out[0]) == 0  # every slot off this rank
    if T:  # a caller's buffer
        buf = torch.full((T, spec.hidden_size), float("nan"), dtype=torch.bfloat16, device="cuda")
        assert layer.experts(x.hidden, ids, weights, w.prepared, out=buf) is buf
        assert torch.equal(buf, layer.experts(x.hidden, ids, weights, w.prepared))


def test_expert_map_places_experts():
    """An explicit global -> local map (-1: not here), scattered, on an unsplit build."""
    layer, w = _layer("qwen3-30b-a3b")
    spec = layer.spec
    T = 300
    x = random_inputs(spec, T, "cuda", _SEED + 17)
    g = torch.Generator(device="cuda").manual_seed(_SEED + 17)
    ids = torch.stack([torch.randperm(spec.num_experts, generator=g, device="cuda")[:spec.top_k] for _ in range(T)])
    weights = torch.rand((T, spec.top_k), generator=g, device="cuda")
    # global expert e lives at local slot perm[e]; a third of the experts are "on another rank"
    perm = torch.randperm(spec.num_experts, generator=g, device="cuda")
    expert_map = perm.to(torch.int32).clone()
    away = torch.arange(spec.num_experts, device="cuda") % 3 == 0
    expert_map[away] = -1
    out = layer.experts(x.hidden, ids, weights, w.prepared, expert_map=expert_map, poison=True)
    # the reference: the same weights, the global expert e computed by local expert perm[e]
    local_of = expert_map.long()
    keep = local_of[ids] >= 0
    ref = reference.moe(spec, x.hidden, local_of[ids].clamp(min=0), (weights * keep).double(),
                        reference.MXFP4Experts(w.w13, w.s13), reference.MXFP4Experts(w.w2, w.s2), w.b13, w.b2)
    err = relative_l2(out, ref)
    print(f"expert map: rel L2 {err:.2e}")
    assert err <= TOLERANCE


def test_hash_routed_layer():
    """DeepSeek-V4's hash layers: ids from tid2eid[input_ids], weights from the router's scores."""
    layer, w = _layer("deepseek-v4-flash")
    spec = layer.spec
    T, vocab = 77, 1000
    g = torch.Generator(device="cuda").manual_seed(_SEED + 23)
    tid2eid = torch.stack([torch.randperm(spec.num_experts, generator=g, device="cuda")[:spec.top_k]
                           for _ in range(vocab)]).to(torch.int32)
    input_ids = torch.randint(0, vocab, (T,), generator=g, device="cuda")
    x = random_inputs(spec, T, "cuda", _SEED + 23)
    ids, weights = hash_route(spec, x.logits, tid2eid, input_ids)
    assert torch.equal(ids, tid2eid[input_ids])
    out = layer.experts(x.hidden, ids, weights, w.prepared, poison=True)
    ref_weights = reference.route_weights(spec, x.logits, x.score_bias, ids.long())
    torch.testing.assert_close(weights.double(), ref_weights, rtol=1e-5, atol=1e-6)
    err = relative_l2(out, reference.moe(spec, x.hidden, ids.long(), ref_weights,
                                         reference.MXFP4Experts(w.w13, w.s13), reference.MXFP4Experts(w.w2, w.s2)))
    assert err <= TOLERANCE


@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")  # T = 0 launches nothing, by design
@pytest.mark.parametrize("T", (0, 5, 600))
def test_both_entry_points_under_cuda_graphs_and_torch_compile(T):
    layer, w = _layer("gpt-oss-20b")
    spec = layer.spec
    x = random_inputs(spec, T, "cuda", _SEED + 29)
    fused = layer(x.hidden, x.logits, w.prepared)
    experts = layer.experts(x.hidden, fused.topk_ids, fused.topk_weights, w.prepared)
    assert torch.equal(experts, fused.out)  # the same rows, summed in the same order
    compiled_fused = torch.compile(lambda h, l: layer(h, l, w.prepared).out, fullgraph=True)
    compiled_experts = torch.compile(lambda h, i, wt: layer.experts(h, i, wt, w.prepared), fullgraph=True)
    assert torch.equal(compiled_fused(x.hidden, x.logits), fused.out)
    assert torch.equal(compiled_experts(x.hidden, fused.topk_ids, fused.topk_weights), fused.out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_fused = layer(x.hidden, x.logits, w.prepared)
        g_experts = layer.experts(x.hidden, fused.topk_ids, fused.topk_weights, w.prepared)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(g_fused.out, fused.out) and torch.equal(g_experts, fused.out)


# --- the batched entry point: rows grouped by local expert (a low-latency EP dispatch's layout) ----------

def _batched_case(spec, M, num_tokens, seed):
    """hidden [E_local, M, H], counts with an empty expert, a negative one and one past M (both clamped), a
    full one, and the rows each expert keeps: its clamped count, cut where the rows in expert order pass
    num_tokens x top_k."""
    E, H = spec.local_experts, spec.hidden_size
    g = torch.Generator(device="cuda").manual_seed(seed)
    hidden = torch.randn((E, M, H), generator=g, device="cuda").to(torch.bfloat16)
    counts = torch.randint(0, M + 1, (E,), generator=g, device="cuda", dtype=torch.int32)
    if M:
        counts[0], counts[1], counts[E // 2], counts[-1] = 0, -3, M + 5, M
    return hidden, counts, _kept(spec, counts, M, num_tokens)


def _kept(spec, counts, M, num_tokens):
    clamped = counts.clamp(0, M).long()
    before = torch.cumsum(clamped, 0) - clamped
    return torch.minimum(clamped, (num_tokens * spec.top_k - before).clamp(min=0))


@pytest.mark.parametrize("M, num_tokens", [(0, 0), (1, 1), (3, 0), (7, 64), (40, 5), (64, 300), (300, 4096)])
@pytest.mark.parametrize("variant", ["deepseek-v4-flash-ep1of8", "gpt-oss-120b", "qwen3-30b-a3b-ep1of4"])
def test_batched_experts(variant, M, num_tokens):
    """Row i < count[e] of expert e is its output, unweighted (GEMM2's bias added); every other row is
    left as it was (poisoned: NaN); num_tokens = 0 and 5 cut the rows at num_tokens x top_k."""
    layer, w = _layer(variant)
    spec = layer.spec
    hidden, counts, kept = _batched_case(spec, M, num_tokens, _SEED + 37 * M + num_tokens)
    out = layer.experts_batched(hidden, counts, w.prepared, num_tokens=num_tokens, poison=True)
    torch.cuda.synchronize()
    assert out.shape == hidden.shape and out.dtype == torch.bfloat16
    written = torch.arange(M, device="cuda")[None, :] < kept[:, None]  # [E, M]
    assert not torch.isnan(out[written]).any(), "a kept row is not written"
    assert torch.isnan(out[~written]).all(), "a row past its expert's count was written"
    # unpoisoned: rows a count names but num_tokens x top_k cut come back NaN, the rows past the counts untouched
    named = torch.arange(M, device="cuda")[None, :] < counts.clamp(0, M).long()[:, None]
    buf = torch.zeros_like(hidden)
    layer.experts_batched(hidden, counts, w.prepared, num_tokens=num_tokens, out=buf)
    assert torch.isnan(buf[named & ~written]).all() and not torch.isnan(buf[written]).any()
    assert not torch.count_nonzero(buf[~named])
    if int(kept.sum()):
        err = relative_l2(out[written], testing.batched_reference(spec, w, hidden, kept))
        print(f"batched {variant} M={M} num_tokens={num_tokens}: {int(kept.sum())} rows, rel L2 {err:.2e}")
        assert err <= TOLERANCE
    # bit for bit the experts-only call's rows on that routing (slot 0 weight 1, the others 0)
    if int(kept.sum()):
        local = torch.repeat_interleave(torch.arange(spec.local_experts, device="cuda"), kept)
        ids = (spec.expert_begin + local)[:, None].repeat(1, spec.top_k)
        weights = torch.zeros(ids.shape, dtype=torch.float32, device="cuda")
        weights[:, 0] = 1
        k = layer.choose_kernels(num_tokens)
        experts = layer.experts(hidden[written], ids, weights, w.prepared, kernels=k)
        assert torch.equal(layer.experts_batched(hidden, counts, w.prepared, num_tokens, kernels=k)[written],
                           experts)


@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")
def test_batched_experts_under_cuda_graphs_and_torch_compile():
    layer, w = _layer("deepseek-v4-flash-ep1of8")
    spec = layer.spec
    hidden, counts, kept = _batched_case(spec, 16, 128, _SEED + 41)
    eager = layer.experts_batched(hidden, counts, w.prepared, num_tokens=128)
    written = torch.arange(16, device="cuda")[None, :] < kept[:, None]
    compiled = torch.compile(lambda h, c: layer.experts_batched(h, c, w.prepared, num_tokens=128), fullgraph=True)
    assert torch.equal(compiled(hidden, counts)[written], eager[written])
    buf = torch.full_like(hidden, float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer.experts_batched(hidden, counts, w.prepared, num_tokens=128, out=buf)
    counts.copy_(counts.flip(0) // 2)  # new counts and a new total, replayed: the graph reads them on the GPU
    kept2 = _kept(spec, counts, 16, 128)
    graph.replay()
    torch.cuda.synchronize()
    written2 = torch.arange(16, device="cuda")[None, :] < kept2[:, None]
    assert torch.equal(buf[written2], layer.experts_batched(hidden, counts, w.prepared, num_tokens=128)[written2])
    assert torch.isnan(buf[~written2]).all()


def test_batched_input_checks():
    layer, w = _layer("deepseek-v4-flash-ep1of8")
    spec = layer.spec
    E, H = spec.local_experts, spec.hidden_size
    hidden = torch.zeros((E, 4, H), dtype=torch.bfloat16, device="cuda")
    counts = torch.ones((E,), dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"hidden_states: shape \(4, 4096\), expected a 3-D tensor"):
        layer.experts_batched(hidden[0], counts, w.prepared, num_tokens=4)
    with pytest.raises(ValueError, match="hidden_states: shape"):
        layer.experts_batched(hidden[1:], counts, w.prepared, num_tokens=4)
    with pytest.raises(ValueError, match="expert_num_tokens: dtype torch.int64"):
        layer.experts_batched(hidden, counts.long(), w.prepared, num_tokens=4)
    with pytest.raises(ValueError, match="expert_num_tokens: shape"):
        layer.experts_batched(hidden, counts[1:], w.prepared, num_tokens=4)
    with pytest.raises(ValueError, match="num_tokens: -1, expected the tokens the dispatch carried"):
        layer.experts_batched(hidden, counts, w.prepared, num_tokens=-1)
    with pytest.raises(ValueError, match="out: shape"):
        layer.experts_batched(hidden, counts, w.prepared, num_tokens=4, out=hidden[:, :2])


# --- batch invariance ---------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["deepseek-v4-flash", "gpt-oss-120b", "gpt-oss-20b", "qwen3-30b-a3b",
                                     "gpt-oss-120b-tp2", "gpt-oss-20b-tp2", "qwen3-30b-a3b-ep1of4",
                                     "deepseek-v4-flash-ep1of8", "deepseek-v3-ep1of8"])
def test_batch_invariance(variant):
    """A token's output is bitwise the same alone and inside batches of any size, whichever kernels
    the dispatch picks for them: every bucket of the shipped table and the token count just past it
    (the next bucket's kernels), up to 16384."""
    layer, w = _layer(variant)
    assert layer.dispatch is not None, "the tests' build has the shipped table's kernels: it should dispatch by it"
    edges = [t for t in layer.dispatch.tokens if t <= 16384]
    sizes = sorted({8, 64, 512, 4096, *edges, *(t + 1 for t in edges if t < 16384)})
    assert_batch_invariant(layer, w, sizes, _SEED + 31)


# --- argument checks ----------------------------------------------------------------------------------

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
    with pytest.raises(ValueError, match="router_logits: dtype torch.float16"):
        layer(x.hidden, x.logits.half(), w.prepared, x.score_bias)
    with pytest.raises(ValueError, match="score_bias: None"):
        layer(x.hidden, x.logits, w.prepared, None)
    with pytest.raises(ValueError, match="hidden_states: on cpu"):
        layer(x.hidden.cpu(), x.logits, w.prepared, x.score_bias)
    with pytest.raises(ValueError, match=r"hidden_states: shape \(4, 4095\), expected \(4, 4096\)"):
        layer(x.hidden[:, :4095].contiguous(), x.logits, w.prepared, x.score_bias)
    with pytest.raises(ValueError, match="not 16-byte aligned|16-byte alignment"):
        buf = torch.empty(4 * spec.hidden_size + 1, dtype=torch.bfloat16, device="cuda")
        layer(buf[1:].view(4, spec.hidden_size), x.logits, w.prepared, x.score_bias)
    with pytest.raises(RuntimeError, match="gemm1_kernel = 99"):
        layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(99, 0))
    with pytest.raises(ValueError, match="weights: prepared in layout 'other'"):
        layer(x.hidden, x.logits, replace(w.prepared, layout="other"), x.score_bias)
    g1 = w.prepared.gemm1
    with pytest.raises(ValueError, match="weights.gemm1.w: shape"):
        layer(x.hidden, x.logits, replace(w.prepared, gemm1=replace(g1, w=g1.w[:1])), x.score_bias)
    # the public custom op checks its arguments too
    with pytest.raises(ValueError, match="handle 12345: not a loaded moegen library"):
        torch.ops.moegen.moe_forward(12345, x.hidden, x.logits, x.score_bias, g1.w, g1.scales, g1.expert_scale,
                                     None, g1.w, g1.scales, g1.expert_scale, None, 0, 0)
    ids = torch.zeros((4, spec.top_k + 1), dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"topk_ids: shape \(4, 7\), expected \(4, 6\)"):
        layer.experts(x.hidden, ids, torch.ones_like(ids, dtype=torch.float32), w.prepared)
    with pytest.raises(ValueError, match="topk_ids: dtype torch.float32"):
        layer.experts(x.hidden, ids[:, :6].float(), ids[:, :6].float(), w.prepared)
    with pytest.raises(ValueError, match=r"expert_map: shape \(255,\), expected \(256,\)"):
        layer.experts(x.hidden, ids[:, :6].contiguous(), ids[:, :6].float(), w.prepared,
                      expert_map=torch.zeros(255, dtype=torch.int32, device="cuda"))
    assert layer.library.workspace_bytes(2**31) == 0 and layer.library.workspace_bytes(-1) == 0
    # Row slices of the routing tensors (a micro-batch split) need only their elements' alignment.
    x5 = random_inputs(spec, 5, "cuda", _SEED + 1)
    routed = layer(x5.hidden, x5.logits, w.prepared, x5.score_bias)
    ids_s, weights_s = routed.topk_ids[1:], routed.topk_weights[1:]
    assert ids_s.data_ptr() % 16 and weights_s.data_ptr() % 16
    torch.testing.assert_close(layer.experts(x5.hidden[1:], ids_s, weights_s, w.prepared),
                               layer.experts(x5.hidden[1:].clone(), ids_s.clone(), weights_s.clone(), w.prepared),
                               rtol=0, atol=0)


def test_dispatch_without_a_table_warns_and_uses_the_heuristic(tmp_path):
    import shutil
    import warnings

    from moegen import dispatch

    layer, _ = _layer("grouped-64e")  # a test-only problem: no table ships for it
    copy = tmp_path / "root" / "grouped-64e" / "sm90"
    shutil.copytree(layer.out_dir, copy, ignore=shutil.ignore_patterns("obj", "src", "logs"))
    dispatch._warned.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        plain = load(copy, spec=layer.spec)
    assert plain.dispatch is None and any("heuristic" in str(s.message) for s in seen)
    assert plain.choose_kernels(1) == dispatch.heuristic_choice(plain.kernels, plain.spec, 1)
