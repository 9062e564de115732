"""float64 MoE reference: routing for every model, activations, moe() against a naive loop, EP/TP sharding."""
import math

import pytest
import torch

from moegen.reference import Routing, activation, moe, route, route_weights, shard_weights
from moegen.spec import known_models, load_model, model_from_dict

SEED = 1234


def tiny_spec(router, activation_cfg, bias=False, **sizes):
    d = {"name": "tiny", "num_experts": 8, "hidden_size": 64, "intermediate_size": 64,
         "router": router, "activation": activation_cfg, **sizes}
    if bias:
        d["bias"] = {"gemm1": True, "gemm2": True}
    return model_from_dict(d)


SWIGLU_TINY = tiny_spec({"kind": "softmax_topk", "top_k": 2}, {"kind": "swiglu", "limit": 10.0})
OAI_TINY = tiny_spec({"kind": "topk_softmax", "top_k": 2},
                     {"kind": "swiglu_oai", "alpha": 1.702, "limit": 7.0}, bias=True)
GROUP_TINY = tiny_spec({"kind": "sigmoid_group_topk", "top_k": 2, "n_group": 4, "topk_group": 2,
                        "group_score": "top2_sum", "score_bias": True, "routed_scaling_factor": 2.5},
                       {"kind": "swiglu"})
SQRTSOFTPLUS_TINY = tiny_spec({"kind": "sqrtsoftplus_topk", "top_k": 3, "score_bias": True,
                               "routed_scaling_factor": 1.5}, {"kind": "swiglu", "limit": 10.0})
TINY_SPECS = [SWIGLU_TINY, OAI_TINY, GROUP_TINY, SQRTSOFTPLUS_TINY]
MODELS = {name: load_model(name) for name in known_models()}


def random_router_inputs(spec, T, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, spec.num_experts, generator=g, dtype=torch.float64) * 2
    bias = torch.randn(spec.num_experts, generator=g, dtype=torch.float64) * 0.1 if spec.router.score_bias else None
    return logits, bias


def naive_route(spec, logits_row, bias_row):
    """One token, plain Python: (ids, weights) straight from the routing description."""
    r, E = spec.router, spec.num_experts
    best_first = lambda candidates, score: sorted(candidates, key=lambda e: (-score[e], e))
    if r.kind == "sigmoid_group_topk":
        scores = [1 / (1 + math.exp(-v)) for v in logits_row]
        sel = [s + (bias_row[e] if bias_row is not None else 0.0) for e, s in enumerate(scores)]
        size = E // r.n_group
        members = [list(range(g * size, (g + 1) * size)) for g in range(r.n_group)]
        group_score = [max(sel[e] for e in m) if r.group_score == "max"
                       else sum(sorted((sel[e] for e in m), reverse=True)[:2]) for m in members]
        kept = best_first(range(r.n_group), group_score)[:r.topk_group]
        ids = best_first([e for g in kept for e in members[g]], sel)[:r.top_k]
        weights = [scores[e] for e in ids]
    elif r.kind == "sqrtsoftplus_topk":  # DeepSeek-V4: plain top-k of sqrt(softplus) + bias
        scores = [math.sqrt(math.log1p(math.exp(v))) for v in logits_row]
        sel = [s + (bias_row[e] if bias_row is not None else 0.0) for e, s in enumerate(scores)]
        ids = best_first(range(E), sel)[:r.top_k]
        weights = [scores[e] for e in ids]
    elif r.kind == "softmax_topk":
        exps = [math.exp(v - max(logits_row)) for v in logits_row]
        probs = [v / sum(exps) for v in exps]
        ids = best_first(range(E), probs)[:r.top_k]
        weights = [probs[e] for e in ids]
    else:
        ids = best_first(range(E), logits_row)[:r.top_k]
        exps = [math.exp(logits_row[e] - logits_row[ids[0]]) for e in ids]
        weights = [v / sum(exps) for v in exps]
    if r.renormalize:
        weights = [w / sum(weights) for w in weights]
    return ids, [w * r.routed_scaling_factor for w in weights]


# --- routing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", list(MODELS.values()) + TINY_SPECS, ids=lambda s: f"{s.name}-{s.router.kind}")
def test_route_matches_naive_and_properties(spec):
    logits, bias = random_router_inputs(spec, T=16)
    routing = route(spec, logits, bias)
    r = spec.router
    assert routing.ids.dtype == torch.int64 and routing.ids.shape == (16, r.top_k)
    assert routing.weights.dtype == torch.float64 and routing.weights.shape == (16, r.top_k)
    assert routing.margin.dtype == torch.float64 and routing.margin.shape == (16,)
    assert (routing.margin >= 0).all()
    for t in range(16):
        row = routing.ids[t].tolist()
        assert len(set(row)) == r.top_k
        ids, weights = naive_route(spec, logits[t].tolist(), None if bias is None else bias.tolist())
        assert row == ids
        assert routing.weights[t].tolist() == pytest.approx(weights, rel=1e-12)
        if r.kind == "sigmoid_group_topk":
            assert len({e // (spec.num_experts // r.n_group) for e in row}) <= r.topk_group
    if r.renormalize or r.kind == "topk_softmax":
        sums = routing.weights.sum(dim=1)
        assert torch.allclose(sums, torch.full_like(sums, r.routed_scaling_factor), rtol=1e-12)
    assert torch.equal(route_weights(spec, logits, bias, routing.ids), routing.weights)


@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v4-flash"])
def test_score_bias_steers_selection_not_weights(name):
    spec = MODELS[name]
    logits, _ = random_router_inputs(spec, T=8)
    unbiased = route(spec, logits, torch.zeros(spec.num_experts, dtype=torch.float64))
    bias = torch.zeros(spec.num_experts, dtype=torch.float64)
    bias[200:] = 5.0  # experts 200.. win every selection (groups 6 and 7)
    biased = route(spec, logits, bias)
    assert not torch.equal(biased.ids, unbiased.ids)
    assert (biased.ids >= 200).all()
    scores = torch.sigmoid(logits) if name == "deepseek-v3" else torch.sqrt(torch.nn.functional.softplus(logits))
    chosen = scores.gather(1, biased.ids)
    expected = chosen / chosen.sum(dim=1, keepdim=True) * spec.router.routed_scaling_factor
    assert torch.allclose(biased.weights, expected, rtol=1e-14)


def test_sqrtsoftplus_by_hand_and_for_large_logits():
    spec = SQRTSOFTPLUS_TINY
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0, 800.0, -800.0, 0.5, 3.0]], dtype=torch.float64)
    bias = torch.tensor([0.0, 0.0, 0.0, 0.0, -1e3, 0.0, 5.0, 0.0], dtype=torch.float64)
    r = route(spec, logits, bias)
    assert r.ids.tolist() == [[6, 7, 3]]  # 6 by its bias; 4's huge logit is outweighed by its bias
    s = [math.sqrt(math.log1p(math.exp(v))) for v in (0.5, 3.0, 2.0)]
    assert r.weights[0].tolist() == pytest.approx([1.5 * v / sum(s) for v in s], rel=1e-14)
    # no overflow: softplus(800) = 800, softplus(-800) = 0
    w = route_weights(spec, logits, bias, torch.tensor([[4, 5, 0]]))
    assert torch.isfinite(w).all() and w[0, 1] == 0


def test_softmax_topk_by_hand():
    logits = torch.tensor([[0.0, 2.0, 1.0, 0.0, -1.0, 3.0, 0.0, 0.0]], dtype=torch.float64)
    routing = route(SWIGLU_TINY, logits)
    assert routing.ids.tolist() == [[5, 1]]
    # softmax then renormalize over the two chosen = softmax over {3, 2}: e^3 / (e^3 + e^2)
    p = math.exp(3) / (math.exp(3) + math.exp(2))
    assert routing.weights.tolist()[0] == pytest.approx([p, 1 - p], rel=1e-14)
    # margin: 2nd best prob minus 3rd best prob, (e^2 - e^1) / sum(e^logits)
    total = sum(math.exp(v) for v in logits[0].tolist())
    assert routing.margin.item() == pytest.approx((math.exp(2) - math.exp(1)) / total, rel=1e-12)

    no_renorm = tiny_spec({"kind": "softmax_topk", "top_k": 2, "renormalize": False,
                           "routed_scaling_factor": 2.0}, {"kind": "swiglu"})
    w = route(no_renorm, logits).weights.tolist()[0]
    assert w == pytest.approx([2 * math.exp(3) / total, 2 * math.exp(2) / total], rel=1e-14)


def test_topk_softmax_by_hand():
    logits = torch.tensor([[1.0, 4.0, 0.5, 4.5, 0.0, 2.0, 3.0, -2.0]], dtype=torch.float64)
    routing = route(OAI_TINY, logits)
    assert routing.ids.tolist() == [[3, 1]]
    p = 1 / (1 + math.exp(-0.5))  # softmax over the chosen logits {4.5, 4}
    assert routing.weights.tolist()[0] == pytest.approx([p, 1 - p], rel=1e-14)
    assert routing.margin.item() == 1.0  # 4 - 3


def test_group_routing_by_hand():
    spec = tiny_spec({"kind": "sigmoid_group_topk", "top_k": 2, "n_group": 4, "topk_group": 2,
                      "group_score": "max", "score_bias": True}, {"kind": "swiglu"})
    # Biased selection scores are built directly: logits 0 give sigmoid 0.5, so bias = score - 0.5.
    sel = torch.tensor([0.1, 0.9, 0.8, 0.2, 0.85, 0.3, 0.1, 0.1], dtype=torch.float64)
    bias = sel - 0.5
    logits = torch.zeros(1, 8, dtype=torch.float64)
    routing = route(spec, logits, bias)
    # group maxima 0.9, 0.8, 0.85, 0.1 -> keep groups 0 and 2; best experts there: 1 (0.9), 4 (0.85)
    assert routing.ids.tolist() == [[1, 4]]
    # expert gap: 0.85 - 0.3 (expert 5; group 1's 0.8 is excluded); group gap: 0.85 - 0.8
    assert routing.margin.item() == pytest.approx(0.05, abs=1e-15)
    assert routing.weights.tolist() == [[0.5, 0.5]]  # unbiased sigmoid(0) = 0.5 each, renormalized


def test_ties_lower_id_first_with_zero_margin():
    logits = torch.zeros(3, 8, dtype=torch.float64)
    for spec in TINY_SPECS:
        bias = torch.zeros(8, dtype=torch.float64) if spec.router.score_bias else None
        routing = route(spec, logits, bias)
        assert routing.ids.tolist() == [list(range(spec.top_k))] * 3
        assert routing.margin.tolist() == [0.0] * 3


def test_margin_infinite_when_every_expert_is_chosen():
    spec = tiny_spec({"kind": "topk_softmax", "top_k": 4}, {"kind": "swiglu"}, num_experts=4)
    routing = route(spec, torch.randn(5, 4, dtype=torch.float64))
    assert torch.isinf(routing.margin).all()
    assert sorted(routing.ids[0].tolist()) == [0, 1, 2, 3]


def test_route_weights_for_other_ids():
    logits, bias = random_router_inputs(GROUP_TINY, T=4)
    ids = torch.tensor([[0, 7], [3, 2], [5, 6], [1, 4]])
    scores = torch.sigmoid(logits).gather(1, ids)
    expected = scores / scores.sum(dim=1, keepdim=True) * 2.5
    assert torch.allclose(route_weights(GROUP_TINY, logits, bias, ids), expected, rtol=1e-14)


def test_route_empty_and_float32_input():
    routing = route(MODELS["deepseek-v3"], torch.zeros(0, 256), torch.zeros(256))
    assert isinstance(routing, Routing)
    assert routing.ids.shape == (0, 8) and routing.weights.shape == (0, 8) and routing.margin.shape == (0,)
    logits, _ = random_router_inputs(SWIGLU_TINY, T=4)
    assert route(SWIGLU_TINY, logits.float()).weights.dtype == torch.float64


def test_route_errors():
    ds = MODELS["deepseek-v4-flash"]
    with pytest.raises(ValueError, match="score_bias"):
        route(ds, torch.zeros(2, 256))
    with pytest.raises(ValueError, match="score_bias"):
        route(MODELS["qwen3-30b-a3b"], torch.zeros(2, 128), torch.zeros(128))
    with pytest.raises(ValueError, match=r"logits: expected shape \(T, 256\), got \(2, 128\)"):
        route(ds, torch.zeros(2, 128), torch.zeros(256))
    with pytest.raises(ValueError, match=r"score_bias: expected shape \(256,\)"):
        route(ds, torch.zeros(2, 256), torch.zeros(128))
    with pytest.raises(ValueError, match=r"ids: expected global expert ids in \[0, 8\)"):
        route_weights(SWIGLU_TINY, torch.zeros(1, 8), None, torch.tensor([[0, 8]]))
    with pytest.raises(ValueError, match=r"ids: expected shape \(1, 2\)"):
        route_weights(SWIGLU_TINY, torch.zeros(1, 8), None, torch.tensor([[0, 1, 2]]))


# --- activation -------------------------------------------------------------------------------

def test_activation_by_hand():
    sigmoid = lambda v: 1 / (1 + math.exp(-v))
    g, u = torch.tensor([8.0, -1.0], dtype=torch.float64), torch.tensor([-9.0, 0.5], dtype=torch.float64)
    # swiglu_oai: g = min(8, 7) = 7, u = clamp(-9) = -7 -> 7 * sigmoid(1.702 * 7) * (-7 + 1)
    out = activation(OAI_TINY, g, u).tolist()
    assert out == pytest.approx([7 * sigmoid(1.702 * 7) * -6, -1 * sigmoid(-1.702) * 1.5], rel=1e-14)
    # swiglu, limit 10: gate clamped above only, up both sides
    g, u = torch.tensor([12.0, -20.0, 2.0]), torch.tensor([-15.0, 3.0, 3.0])
    out = activation(SWIGLU_TINY, g.double(), u.double()).tolist()
    assert out == pytest.approx([10 * sigmoid(10) * -10, -20 * sigmoid(-20) * 3, 2 * sigmoid(2) * 3], rel=1e-14)
    # swiglu without limit: no clamping at all
    out = activation(GROUP_TINY, g.double(), u.double()).tolist()
    assert out == pytest.approx([12 * sigmoid(12) * -15, -20 * sigmoid(-20) * 3, 2 * sigmoid(2) * 3], rel=1e-14)


# --- moe ----------------------------------------------------------------------------------------

def random_layer(spec, T, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    E, H, I = spec.num_experts, spec.hidden_size, spec.intermediate_size
    rand = lambda *shape, scale=1.0: torch.randn(*shape, generator=g, dtype=torch.float64) * scale
    hidden = rand(T, H)
    w13, w2 = rand(E, 2 * I, H, scale=H ** -0.5), rand(E, H, I, scale=I ** -0.5)
    b13 = rand(E, 2 * I) if spec.gemm1_bias else None
    b2 = rand(E, H) if spec.gemm2_bias else None
    logits, bias = random_router_inputs(spec, T, seed)
    routing = route(spec, logits, bias)
    return hidden, routing.ids, routing.weights, w13, w2, b13, b2


def naive_moe(spec, hidden, ids, weights, w13, w2, b13, b2):
    """Token by token, slot by slot, with the activation written out from its description."""
    a, I = spec.activation, spec.local_intermediate
    out = torch.zeros(hidden.shape[0], spec.hidden_size, dtype=torch.float64)
    for t in range(hidden.shape[0]):
        for slot in range(spec.top_k):
            e = int(ids[t, slot]) - spec.expert_begin
            if not 0 <= e < spec.local_experts:
                continue
            gu = w13[e] @ hidden[t] + (b13[e] if b13 is not None else 0)
            gate, up = gu[:I], gu[I:]
            if a.limit is not None:
                gate, up = torch.minimum(gate, torch.tensor(a.limit)), up.clamp(-a.limit, a.limit)
            if a.kind == "swiglu":
                h = gate / (1 + torch.exp(-gate)) * up
            else:
                h = gate / (1 + torch.exp(-a.alpha * gate)) * (up + 1)
            out[t] += weights[t, slot] * (w2[e] @ h + (b2[e] if b2 is not None else 0))
    return out


@pytest.mark.parametrize("spec", TINY_SPECS, ids=lambda s: s.activation.kind + "-" + s.router.kind)
def test_moe_matches_naive_loop(spec):
    layer = random_layer(spec, T=24)
    out = moe(spec, *layer)
    assert out.dtype == torch.float64 and out.shape == (24, 64)
    assert torch.allclose(out, naive_moe(spec, *layer), rtol=1e-12, atol=1e-12)
    assert out.abs().max() > 0.1


def test_moe_gate_up_order():
    # Only expert 0, weight 1, gate row = x, up row = 2x (per output column): out = w2 @ (silu(g) * u).
    spec = SWIGLU_TINY
    hidden = torch.zeros(1, 64, dtype=torch.float64)
    hidden[0, 0] = 1.0
    w13 = torch.zeros(8, 128, 64, dtype=torch.float64)
    w13[0, 0, 0] = 1.0  # gate column 0 = 1
    w13[0, 64, 0] = 3.0  # up column 0 = 3
    w2 = torch.zeros(8, 64, 64, dtype=torch.float64)
    w2[0, 5, 0] = 1.0
    out = moe(spec, hidden, torch.tensor([[0, 1]]), torch.tensor([[1.0, 0.0]], dtype=torch.float64), w13, w2)
    expected = torch.zeros(1, 64, dtype=torch.float64)
    expected[0, 5] = 1 / (1 + math.exp(-1)) * 3  # silu(1) * 3
    assert torch.allclose(out, expected, rtol=1e-15)


def test_moe_empty_batch():
    for spec in TINY_SPECS:
        hidden, ids, weights, w13, w2, b13, b2 = random_layer(spec, T=0)
        out = moe(spec, hidden, ids, weights, w13, w2, b13, b2)
        assert out.shape == (0, 64) and out.dtype == torch.float64


@pytest.mark.parametrize("spec", [SWIGLU_TINY, OAI_TINY, GROUP_TINY], ids=lambda s: s.activation.kind)
@pytest.mark.parametrize("ep_size", [2, 4, 8])
def test_expert_parallel_sum_equals_full(spec, ep_size):
    hidden, ids, weights, w13, w2, b13, b2 = random_layer(spec, T=32)
    full = moe(spec, hidden, ids, weights, w13, w2, b13, b2)
    total = torch.zeros_like(full)
    for rank in range(ep_size):
        rank_spec = spec.with_parallel(ep_size=ep_size, ep_rank=rank)
        shards = shard_weights(spec, w13, w2, b13, b2, tp_size=1, tp_rank=0, ep_size=ep_size, ep_rank=rank)
        assert shards[0].shape == (8 // ep_size, 128, 64)
        part = moe(rank_spec, hidden, ids, weights, *shards)
        assert torch.allclose(part, naive_moe(rank_spec, hidden, ids, weights, *shards), rtol=1e-12, atol=1e-12)
        total += part
    assert torch.allclose(total, full, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", [SWIGLU_TINY, OAI_TINY], ids=lambda s: s.activation.kind)
# (I = 96, TP 2) and (160, 3): the last rank's 32-group slice is padded with a zero group
@pytest.mark.parametrize("tp_size,ep_size,intermediate", [(2, 1, 128), (4, 1, 128), (2, 2, 128), (2, 1, 96), (3, 2, 160)])
def test_tensor_parallel_sum_equals_full(spec, tp_size, ep_size, intermediate):
    spec = tiny_spec({"kind": spec.router.kind, "top_k": 2},
                     {"kind": spec.activation.kind, "limit": spec.activation.limit, "alpha": spec.activation.alpha},
                     bias=spec.gemm1_bias, intermediate_size=intermediate)
    hidden, ids, weights, w13, w2, b13, b2 = random_layer(spec, T=16)
    full = moe(spec, hidden, ids, weights, w13, w2, b13, b2)
    total = torch.zeros_like(full)
    for tp_rank in range(tp_size):
        for ep_rank in range(ep_size):
            rank_spec = spec.with_parallel(tp_size=tp_size, ep_size=ep_size, ep_rank=ep_rank)
            shards = shard_weights(spec, w13, w2, b13, b2, tp_size, tp_rank, ep_size, ep_rank)
            total += moe(rank_spec, hidden, ids, weights, *shards)
    assert torch.allclose(total, full, rtol=1e-12, atol=1e-12)


def test_shard_weights_slices():
    spec = OAI_TINY
    _, _, _, w13, w2, b13, b2 = random_layer(spec, T=1)
    s13, s2, sb13, sb2 = shard_weights(spec, w13, w2, b13, b2, tp_size=2, tp_rank=1, ep_size=2, ep_rank=1)
    # experts 4..7; intermediate columns 32..63 of gate rows [0, 64) and of up rows [64, 128)
    assert torch.equal(s13, torch.cat((w13[4:, 32:64], w13[4:, 96:128]), dim=1))
    assert torch.equal(s2, w2[4:, :, 32:64])
    assert torch.equal(sb13, torch.cat((b13[4:, 32:64], b13[4:, 96:128]), dim=1))
    assert torch.equal(sb2, torch.zeros(4, 64, dtype=torch.float64))  # b2 only on tp rank 0
    assert torch.equal(shard_weights(spec, w13, w2, b13, b2, 2, 0, 2, 1)[3], b2[4:])
    _, _, _, w13, w2, _, _ = random_layer(SWIGLU_TINY, T=1)
    assert shard_weights(SWIGLU_TINY, w13, w2, None, None, 2, 0, 1, 0)[2:] == (None, None)
    padded = tiny_spec({"kind": "topk_softmax", "top_k": 2}, {"kind": "swiglu_oai", "alpha": 1.702, "limit": 7.0},
                       bias=True, intermediate_size=96)  # TP 2: 64 columns each, rank 1's last 32 zero
    _, _, _, w13, w2, b13, b2 = random_layer(padded, T=1)
    s13, s2, sb13, _ = shard_weights(padded, w13, w2, b13, b2, tp_size=2, tp_rank=1, ep_size=1, ep_rank=0)
    zeros13 = torch.zeros(8, 32, 64, dtype=torch.float64)
    assert torch.equal(s13, torch.cat((w13[:, 64:96], zeros13, w13[:, 160:192], zeros13), dim=1))
    assert torch.equal(s2, torch.cat((w2[:, :, 64:96], torch.zeros(8, 64, 32, dtype=torch.float64)), dim=2))
    assert torch.equal(sb13, torch.cat((b13[:, 64:96], torch.zeros(8, 32, dtype=torch.float64),
                                        b13[:, 160:192], torch.zeros(8, 32, dtype=torch.float64)), dim=1))


def test_shard_weights_errors():
    _, _, _, w13, w2, b13, b2 = random_layer(OAI_TINY, T=1)
    with pytest.raises(ValueError, match="tp_rank"):
        shard_weights(OAI_TINY, w13, w2, b13, b2, tp_size=2, tp_rank=2, ep_size=1, ep_rank=0)
    with pytest.raises(ValueError, match="ep_size"):
        shard_weights(OAI_TINY, w13, w2, b13, b2, tp_size=1, tp_rank=0, ep_size=3, ep_rank=0)
    with pytest.raises(ValueError, match="b2"):
        shard_weights(OAI_TINY, w13, w2, b13, None, tp_size=1, tp_rank=0, ep_size=1, ep_rank=0)


def test_moe_shape_errors():
    spec = OAI_TINY
    hidden, ids, weights, w13, w2, b13, b2 = random_layer(spec, T=4)
    with pytest.raises(ValueError, match=r"hidden: expected shape \(T, 64\), got \(4, 32\)"):
        moe(spec, hidden[:, :32], ids, weights, w13, w2, b13, b2)
    with pytest.raises(ValueError, match=r"w13: expected shape \(8, 128, 64\), got \(8, 64, 64\)"):
        moe(spec, hidden, ids, weights, w13[:, :64], w2, b13, b2)
    with pytest.raises(ValueError, match=r"w2: expected shape \(8, 64, 64\), got \(4, 64, 64\)"):
        moe(spec, hidden, ids, weights, w13, w2[:4], b13, b2)
    with pytest.raises(ValueError, match=r"weights: expected shape \(4, 2\)"):
        moe(spec, hidden, ids, weights[:, :1], w13, w2, b13, b2)
    with pytest.raises(ValueError, match=r"ids: expected shape \(4, 2\)"):
        moe(spec, hidden, ids[:3], weights, w13, w2, b13, b2)
    with pytest.raises(ValueError, match="b13: expected a tensor"):
        moe(spec, hidden, ids, weights, w13, w2, None, b2)
    with pytest.raises(ValueError, match=r"b2: expected shape \(8, 64\)"):
        moe(spec, hidden, ids, weights, w13, w2, b13, b2[:, :8])
    with pytest.raises(ValueError, match="b13: expected None"):
        moe(SWIGLU_TINY, hidden, ids, weights, w13, w2, b13, None)
    # sharded spec: local sizes are expected
    rank_spec = spec.with_parallel(tp_size=2, ep_size=2, ep_rank=0)
    with pytest.raises(ValueError, match=r"w13: expected shape \(4, 64, 64\)"):
        moe(rank_spec, hidden, ids, weights, w13, w2, b13, b2)


def _sm100_layer_in_fp32(spec, hidden, ids, weights, w13, w2, b13, b2):
    """The SM100 layer's arithmetic as sm100/pipeline.cuh orders it, with fp32 accumulation: MXFP8 hidden
    rows, GEMM1 stored in bf16, bias and SwiGLU in fp32, MXFP8 `h`, GEMM2 stored in bf16, routing weight
    and bias in fp32, the sum rounded to bf16."""
    from moegen.mxfp8 import round_trip_mxfp8
    I = spec.intermediate_size
    x = round_trip_mxfp8(hidden).float()
    out = torch.zeros(hidden.shape[0], spec.hidden_size)
    for e in range(spec.num_experts):
        tokens, slots = torch.nonzero(ids == e, as_tuple=True)
        gu = (x[tokens] @ w13[e].float().T).to(torch.bfloat16).float()
        if b13 is not None:
            gu = gu + b13[e].float()
        h = round_trip_mxfp8(activation(spec, gu[:, :I], gu[:, I:])).float()
        y = (h @ w2[e].float().T).to(torch.bfloat16).float()
        if b2 is not None:
            y = y + b2[e].float()
        out.index_add_(0, tokens, y * weights[tokens, slots].float().unsqueeze(1))
    return out.to(torch.bfloat16)


@pytest.mark.parametrize("bias", [False, True])
def test_the_mxfp8_reference_is_the_sm100_layers_arithmetic(bias):
    """Against a float32 emulation of the SM100 layer the mxfp8 reference leaves only accumulation
    rounding: well inside moegen.testing's MXFP8 bound at one token, where a bound is tightest."""
    from moegen.mxfp4 import dequantize, quantize
    from moegen.testing import TOLERANCE, relative_l2
    spec = tiny_spec({"kind": "topk_softmax", "top_k": 2},
                     {"kind": "swiglu_oai", "alpha": 1.702, "limit": 7.0} if bias else {"kind": "swiglu"},
                     bias=bias, hidden_size=512, intermediate_size=256)
    worst = 0.0
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        E, H, I = spec.num_experts, spec.hidden_size, spec.intermediate_size
        w13 = dequantize(*quantize(torch.randn(E, 2 * I, H, generator=g) * H ** -0.5)).double()
        w2 = dequantize(*quantize(torch.randn(E, H, I, generator=g) * I ** -0.5)).double()
        b13 = torch.randn(E, 2 * I, generator=g, dtype=torch.float64) * 0.1 if bias else None
        b2 = torch.randn(E, H, generator=g, dtype=torch.float64) * 0.1 if bias else None
        T = 1 + seed % 3
        hidden = torch.randn(T, H, generator=g).to(torch.bfloat16).double()
        ids = torch.stack([torch.randperm(E, generator=g)[:2] for _ in range(T)])
        weights = torch.rand(T, 2, generator=g, dtype=torch.float64)
        ref = moe(spec, hidden, ids, weights, w13, w2, b13, b2, activation_format="mxfp8")
        worst = max(worst, relative_l2(_sm100_layer_in_fp32(spec, hidden, ids, weights, w13, w2, b13, b2), ref))
    print(f"fp32 emulation against the mxfp8 reference: worst relative L2 {worst:.2e}")
    assert worst < TOLERANCE["mxfp8"] / 2
