"""Checkpoint loaders: small synthetic checkpoints written in each published layout (tensor names,
dtypes, shapes, gate/up order, scale storage, a sharded index), loaded for EP and TP ranks, compared
bit for bit with an independent slicing of the same weights; and every bad checkpoint is a one-line
error naming the tensor."""
import json
import re

import pytest
import torch
from safetensors.torch import save_file

from moegen.checkpoint import CheckpointError, load_experts, load_raw_experts
from moegen.mxfp4 import dequantize, quantize
from moegen.prepare import prepare
from moegen.spec import model_from_dict

SEED = 7

SPECS = {
    # I = 96: TP 2 pads each rank to two 32-groups (the second rank's last is zero), TP 3 splits exactly
    "gpt_oss": dict(name="tiny-oss", num_experts=8, hidden_size=64, intermediate_size=96,
                    router=dict(kind="topk_softmax", top_k=2),
                    activation=dict(kind="swiglu_oai", alpha=1.702, limit=7.0), bias=dict(gemm1=True, gemm2=True)),
    "deepseek_v4": dict(name="tiny-v4", num_experts=8, hidden_size=64, intermediate_size=96,
                        router=dict(kind="sqrtsoftplus_topk", top_k=2, score_bias=True, routed_scaling_factor=1.5,
                                    hash_layers=1), activation=dict(kind="swiglu", limit=10.0)),
    # I = 192: one and a half 128-blocks, and TP2 splits a block
    "deepseek_v3": dict(name="tiny-v3", num_experts=8, hidden_size=256, intermediate_size=192,
                        router=dict(kind="sigmoid_group_topk", top_k=2, n_group=2, topk_group=1,
                                    group_score="top2_sum", score_bias=True), activation=dict(kind="swiglu")),
    "qwen3_moe": dict(name="tiny-qwen", num_experts=8, hidden_size=64, intermediate_size=96,
                      router=dict(kind="softmax_topk", top_k=2), activation=dict(kind="swiglu")),
    # DeepSeek-V3's layer and tensor names under other model types: Kimi-K2 (FP8, one expert group) and
    # GLM-4.5 (bf16; its config.json names no router fields)
    "kimi_k2": dict(name="tiny-kimi", num_experts=8, hidden_size=256, intermediate_size=192,
                    router=dict(kind="sigmoid_group_topk", top_k=2, n_group=1, topk_group=1, group_score="top2_sum",
                                score_bias=True, routed_scaling_factor=2.827), activation=dict(kind="swiglu")),
    "glm4_moe": dict(name="tiny-glm", num_experts=8, hidden_size=64, intermediate_size=96,
                     router=dict(kind="sigmoid_group_topk", top_k=2, n_group=1, topk_group=1, group_score="top2_sum",
                                 score_bias=True, routed_scaling_factor=2.5), activation=dict(kind="swiglu")),
}
SPECS["minimax_m2"] = dict(name="tiny-minimax", num_experts=8, hidden_size=256, intermediate_size=192,
                          router=dict(kind="sigmoid_group_topk", top_k=2, n_group=1, topk_group=1,
                                      group_score="top2_sum", score_bias=True), activation=dict(kind="swiglu"))
DEEPSEEK_V3_LAYER = ("deepseek_v3", "kimi_k2", "glm4_moe")
PUBLISHED_FP8 = ("deepseek_v3", "kimi_k2", "minimax_m2")
# Where each float layout keeps a layer's experts and router, and its projections' names (gate, up, down).
FLOAT_NAMES = {t: ("mlp", ("gate_proj", "up_proj", "down_proj")) for t in DEEPSEEK_V3_LAYER + ("qwen3_moe",)}
FLOAT_NAMES["minimax_m2"] = ("block_sparse_moe", ("w1", "w3", "w2"))


def config_json(model_type: str, spec, fp8) -> dict:
    """The config.json a published model of this architecture would carry for spec's layer (fp8: how its
    float experts are stored, as write_checkpoint takes it)."""
    r, E, H, I = spec.router, spec.num_experts, spec.hidden_size, spec.intermediate_size
    common = dict(model_type=model_type, hidden_size=H, num_experts_per_tok=r.top_k, num_hidden_layers=4)
    return dict(common, **{
        "gpt_oss": dict(num_local_experts=E, intermediate_size=I, swiglu_limit=spec.activation.limit,
                        quantization_config=dict(quant_method="mxfp4")),
        "deepseek_v4": dict(n_routed_experts=E, moe_intermediate_size=I, scoring_func="sqrtsoftplus",
                            topk_method="noaux_tc", norm_topk_prob=r.renormalize,
                            routed_scaling_factor=r.routed_scaling_factor, num_hash_layers=r.hash_layers,
                            swiglu_limit=spec.activation.limit, expert_dtype="fp4"),
        "deepseek_v3": dict(n_routed_experts=E, moe_intermediate_size=I, scoring_func="sigmoid", topk_method="noaux_tc",
                            n_group=r.n_group, topk_group=r.topk_group, norm_topk_prob=r.renormalize,
                            routed_scaling_factor=r.routed_scaling_factor, first_k_dense_replace=1),
        "qwen3_moe": dict(num_experts=E, moe_intermediate_size=I, norm_topk_prob=r.renormalize, hidden_act="silu",
                          decoder_sparse_step=1, mlp_only_layers=[]),
        "kimi_k2": dict(n_routed_experts=E, moe_intermediate_size=I, scoring_func="sigmoid", topk_method="noaux_tc",
                        n_group=r.n_group, topk_group=r.topk_group, norm_topk_prob=r.renormalize,
                        routed_scaling_factor=r.routed_scaling_factor, first_k_dense_replace=1, hidden_act="silu"),
        "glm4_moe": dict(n_routed_experts=E, moe_intermediate_size=I, n_group=r.n_group, topk_group=r.topk_group,
                         norm_topk_prob=r.renormalize, routed_scaling_factor=r.routed_scaling_factor,
                         first_k_dense_replace=1, n_shared_experts=1, hidden_act="silu"),
        "minimax_m2": dict(num_local_experts=E, intermediate_size=I, scoring_func="sigmoid", use_routing_bias=True,
                           hidden_act="silu", shared_intermediate_size=0),
    }[model_type], **({} if not fp8 else dict(quantization_config=dict(
        blocks=FP8_QUANTIZATION, ue8m0=dict(FP8_QUANTIZATION, scale_fmt="ue8m0"), channels=FP8_CHANNEL_QUANTIZATION)[fp8])))


FP8_QUANTIZATION = dict(activation_scheme="dynamic", fmt="e4m3", quant_method="fp8", weight_block_size=[128, 128])
# compressed-tensors' FP8 with a scale per output channel (GLM-4.5-FP8's config.json)
FP8_CHANNEL_QUANTIZATION = dict(quant_method="compressed-tensors", format="float-quantized", config_groups=dict(
    group_0=dict(targets=["Linear"], weights=dict(num_bits=8, type="float", strategy="channel", dynamic=False,
                                                  symmetric=True),
                 input_activations=dict(num_bits=8, type="float", strategy="token", dynamic=True, symmetric=True))),
    ignore=["lm_head"])

LAYER = 1  # a layer above DeepSeek-V4's one hash layer of these specs


def _raw_mxfp4(g, E, N, K):
    w = torch.randint(0, 256, (E, N, K // 2), generator=g, dtype=torch.int32).to(torch.uint8)
    s = torch.randint(118, 124, (E, N, K // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    return w, s


def write_checkpoint(tmp_path, model_type, shards=2, fp8=None):
    """A model directory in the layout of model_type, and the weights it holds in moegen's order.  fp8
    (float layouts): None, the published format; False, bf16; True or "blocks", e4m3 with a scale per
    128 x 128 block (DeepSeek-V3's); "ue8m0", those scales powers of two (DeepSeek-V3.1 and later);
    "channels", e4m3 with a scale per output row (compressed-tensors, GLM-4.5's FP8 releases)."""
    spec = model_from_dict(SPECS[model_type])
    E, H, I = spec.num_experts, spec.hidden_size, spec.intermediate_size
    g = torch.Generator().manual_seed(SEED)
    t, truth = {}, {}
    if model_type in ("gpt_oss", "deepseek_v4"):
        w13, s13 = _raw_mxfp4(g, E, 2 * I, H)  # gate rows, then up rows
        w2, s2 = _raw_mxfp4(g, E, H, I)
        truth.update(w13=w13, s13=s13, w2=w2, s2=s2)
        if model_type == "gpt_oss":
            inter = torch.empty_like(w13)
            inter[:, 0::2], inter[:, 1::2] = w13[:, :I], w13[:, I:]
            inter_s = torch.empty_like(s13)
            inter_s[:, 0::2], inter_s[:, 1::2] = s13[:, :I], s13[:, I:]
            b13 = torch.randn(E, 2 * I, generator=g).to(torch.bfloat16)
            inter_b = torch.empty_like(b13)
            inter_b[:, 0::2], inter_b[:, 1::2] = b13[:, :I], b13[:, I:]
            b2 = torch.randn(E, H, generator=g).to(torch.bfloat16)
            truth.update(b13=b13.float(), b2=b2.float())
            p = f"model.layers.{LAYER}.mlp"
            t[f"{p}.experts.gate_up_proj_blocks"] = inter.reshape(E, 2 * I, H // 32, 16)
            t[f"{p}.experts.gate_up_proj_scales"] = inter_s
            t[f"{p}.experts.gate_up_proj_bias"] = inter_b
            t[f"{p}.experts.down_proj_blocks"] = w2.reshape(E, H, I // 32, 16)
            t[f"{p}.experts.down_proj_scales"] = s2
            t[f"{p}.experts.down_proj_bias"] = b2
            t[f"{p}.router.weight"] = torch.randn(E, H, generator=g).to(torch.bfloat16)
            t[f"{p}.router.bias"] = torch.randn(E, generator=g).to(torch.bfloat16)
        else:
            p = f"layers.{LAYER}.ffn"
            for j in range(E):
                t[f"{p}.experts.{j}.w1.weight"] = w13[j, :I].view(torch.int8)
                t[f"{p}.experts.{j}.w3.weight"] = w13[j, I:].view(torch.int8)
                t[f"{p}.experts.{j}.w2.weight"] = w2[j].view(torch.int8)
                t[f"{p}.experts.{j}.w1.scale"] = s13[j, :I].view(torch.float8_e8m0fnu)
                t[f"{p}.experts.{j}.w3.scale"] = s13[j, I:].view(torch.float8_e8m0fnu)
                t[f"{p}.experts.{j}.w2.scale"] = s2[j].view(torch.float8_e8m0fnu)
            t[f"{p}.gate.weight"] = torch.randn(E, H, generator=g).to(torch.bfloat16)
            t[f"{p}.gate.bias"] = torch.randn(E, generator=g)
            t["layers.0.ffn.gate.tid2eid"] = torch.randint(0, E, (100, 2), generator=g, dtype=torch.int32)
    else:
        fp8 = model_type in PUBLISHED_FP8 if fp8 is None else fp8
        fp8 = "blocks" if fp8 is True else fp8
        w13f = torch.randn(E, 2 * I, H, generator=g) * 0.02
        w2f = torch.randn(E, H, I, generator=g) * 0.02
        block, (gate_name, up_name, down_name) = FLOAT_NAMES[model_type]
        p = f"model.layers.{LAYER}.{block}"
        for j in range(E):
            for name, w in ((gate_name, w13f[j, :I]), (up_name, w13f[j, I:]), (down_name, w2f[j])):
                key = f"{p}.experts.{j}.{name}"
                if fp8 == "channels":  # e4m3 values, one fp32 scale per output row
                    scale = torch.rand(w.shape[0], 1, generator=g) * 1e-3 + 1e-4
                    q = (w / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
                    t[f"{key}.weight"], t[f"{key}.weight_scale"] = q, scale
                    w.copy_(q.float() * scale)
                elif fp8:  # e4m3 values, one fp32 scale per 128 x 128 block
                    rb, cb = -(-w.shape[0] // 128), -(-w.shape[1] // 128)
                    scale = torch.rand(rb, cb, generator=g) * 1e-3 + 1e-4
                    if fp8 == "ue8m0":
                        scale = torch.exp2(torch.randint(-10, -6, (rb, cb), generator=g).float())
                    full = scale.repeat_interleave(128, 0)[:w.shape[0]].repeat_interleave(128, 1)[:, :w.shape[1]]
                    # clamped: before torch 2.13 an out-of-range cast to e4m3fn gives NaN, not 448
                    q = (w / full).clamp(-448, 448).to(torch.float8_e4m3fn)
                    t[f"{key}.weight"], t[f"{key}.weight_scale_inv"] = q, scale
                    w.copy_(q.float() * full)  # what the checkpoint holds, in float
                else:
                    t[f"{key}.weight"] = w.to(torch.bfloat16)
                    w.copy_(w.to(torch.bfloat16).float())
        truth.update(w13f=w13f, w2f=w2f)
        t[f"{p}.gate.weight"] = torch.randn(E, H, generator=g).to(
            torch.float32 if model_type == "minimax_m2" else torch.bfloat16)
        if model_type in DEEPSEEK_V3_LAYER:
            t[f"{p}.gate.e_score_correction_bias"] = torch.randn(E, generator=g)
        if model_type == "minimax_m2":
            t[f"{p}.e_score_correction_bias"] = torch.randn(E, generator=g)
    names = sorted(t)
    weight_map = {}
    for i in range(shards):  # round robin: a weight and its scales land in different shards
        part = {n: t[n].contiguous() for n in names[i::shards]}
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file(part, str(tmp_path / file))
        weight_map.update((n, file) for n in part)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps(config_json(model_type, spec, fp8)))
    return spec, t, truth


def expected_raw(spec, truth, tp_rank):
    """This rank's experts sliced from the full weights, independently of the loader."""
    I, e0, e1 = spec.intermediate_size, spec.expert_begin, spec.expert_begin + spec.local_experts
    Il = spec.local_intermediate
    c0 = tp_rank * Il  # this rank's columns: c0 .. c0 + Il, those past I zero
    pad = max(0, c0 + Il - I)
    c1 = c0 + Il - pad

    def padded(t, dim, n):
        return torch.cat((t, t.new_zeros(*t.shape[:dim], n, *t.shape[dim + 1:])), dim)

    def gate_up(t):  # [E, 2I, ...] -> the rank's gate rows, padded, then its up rows, padded
        return torch.cat((padded(t[e0:e1, c0:c1], 1, pad), padded(t[e0:e1, I + c0:I + c1], 1, pad)), 1)

    if "w13" in truth:
        out = dict(w13=gate_up(truth["w13"]), s13=gate_up(truth["s13"]),
                   w2=padded(truth["w2"][e0:e1, :, c0 // 2:c1 // 2], 2, pad // 2),
                   s2=padded(truth["s2"][e0:e1, :, c0 // 32:c1 // 32], 2, pad // 32))
        if "b13" in truth:
            out.update(b13=gate_up(truth["b13"]),
                       b2=truth["b2"][e0:e1] if tp_rank == 0 else torch.zeros_like(truth["b2"][e0:e1]))
        return out
    q13, s13 = quantize(truth["w13f"])
    q2, s2 = quantize(truth["w2f"][e0:e1, :, c0:c1])
    return dict(w13=gate_up(q13), s13=gate_up(s13), w2=padded(q2, 2, pad // 2), s2=padded(s2, 2, pad // 32))


SPLITS = [dict(), dict(ep_size=2, ep_rank=1), dict(tp_size=2), dict(tp_size=3), dict(tp_size=2, ep_size=4, ep_rank=3)]


@pytest.mark.parametrize("split", SPLITS, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()) or "full")
@pytest.mark.parametrize("model_type", list(SPECS))
def test_loaded_experts_are_this_ranks_slices(tmp_path, model_type, split):
    full, tensors, truth = write_checkpoint(tmp_path, model_type)
    spec = full.with_parallel(**split) if split else full
    for tp_rank in range(spec.parallel.tp_size):
        raw, router = load_raw_experts(tmp_path, spec, LAYER, tp_rank=tp_rank)
        want = expected_raw(spec, truth, tp_rank)
        for name, value in want.items():
            got = getattr(raw, name)
            assert got.dtype == value.dtype and torch.equal(got, value), (name, tp_rank)
        assert (raw.b13 is None) == ("b13" not in want)
        assert router["router_weight"].shape == (full.num_experts, full.hidden_size)
    if model_type in PUBLISHED_FP8:  # the FP8 block scales were applied: the dequantized slice is close
        d = dequantize(raw.w13[0], raw.s13[0])
        ref = truth["w13f"][spec.expert_begin][torch.cat((torch.arange(96, 192), torch.arange(288, 384)))] \
            if spec.parallel.tp_size == 2 else None
        if ref is not None:
            assert ((d - ref).norm() / ref.norm()).item() < 0.15  # MXFP4's own rounding, nothing structural


@pytest.mark.parametrize("model_type", list(SPECS))
def test_load_experts_prepares_and_returns_the_router(tmp_path, model_type):
    spec, tensors, truth = write_checkpoint(tmp_path, model_type, shards=1)
    layer = load_experts(tmp_path, spec, LAYER)
    want = expected_raw(spec, truth, 0)
    ref = prepare(spec, want["w13"], want["s13"], want["w2"], want["s2"], want.get("b13"), want.get("b2"))
    for got, exp in ((layer.experts.gemm1, ref.gemm1), (layer.experts.gemm2, ref.gemm2)):
        assert torch.equal(got.w, exp.w) and torch.equal(got.scales, exp.scales)
        assert torch.equal(got.expert_scale, exp.expert_scale)
        assert (got.bias is None) == (exp.bias is None) and (got.bias is None or torch.equal(got.bias, exp.bias))
    hidden = torch.randn(3, spec.hidden_size).to(torch.bfloat16)
    logits = layer.router_logits(hidden)
    assert logits.shape == (3, spec.num_experts) and logits.dtype == torch.float32
    if model_type == "gpt_oss":
        assert layer.router_bias is not None
        torch.testing.assert_close(logits, hidden.float() @ layer.router_weight.float().t() + layer.router_bias.float())
    assert (layer.score_bias is not None) == (model_type in ("deepseek_v4", "minimax_m2") + DEEPSEEK_V3_LAYER)


def test_deepseek_v4_hash_layer_returns_its_table(tmp_path):
    spec, tensors, _ = write_checkpoint(tmp_path, "deepseek_v4")
    # layer 0 is a hash layer: copy layer 1's experts under layer 0's names
    extra = {k.replace(f"layers.{LAYER}.", "layers.0."): v for k, v in tensors.items()
             if k.startswith(f"layers.{LAYER}.ffn.experts") or k.endswith("gate.weight")}
    save_file({k: v.contiguous() for k, v in extra.items()}, str(tmp_path / "layer0.safetensors"))
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    index["weight_map"].update((k, "layer0.safetensors") for k in extra)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    _, router = load_raw_experts(tmp_path, spec, 0)
    assert torch.equal(router["tid2eid"], tensors["layers.0.ffn.gate.tid2eid"]) and "score_bias" not in router


@pytest.mark.parametrize("damage, message", [
    (lambda t: t.pop("model.layers.1.mlp.experts.3.up_proj.weight"),
     "no tensor 'model.layers.1.mlp.experts.3.up_proj.weight' (expected BF16 or F16 or F32 (96, 64))"),
    (lambda t: t.__setitem__("model.layers.1.mlp.experts.0.down_proj.weight", torch.zeros(64, 32, dtype=torch.bfloat16)),
     "tensor 'model.layers.1.mlp.experts.0.down_proj.weight' is BF16 (64, 32), expected BF16 or F16 or F32 (64, 96)"),
    (lambda t: t.__setitem__("model.layers.1.mlp.gate.weight", torch.zeros(8, 64, dtype=torch.int32)),
     "tensor 'model.layers.1.mlp.gate.weight' is I32 (8, 64), expected BF16 or F32 (8, 64)"),
])
def test_bad_tensors_name_themselves(tmp_path, damage, message):
    spec, tensors, _ = write_checkpoint(tmp_path, "qwen3_moe", shards=1)
    damage(tensors)
    for f in tmp_path.glob("*.safetensors"):
        f.unlink()
    (tmp_path / "model.safetensors.index.json").unlink()
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as excinfo:
        load_raw_experts(tmp_path, spec, LAYER)
    assert message in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_bad_requests(tmp_path):
    spec, _, _ = write_checkpoint(tmp_path, "qwen3_moe")
    with pytest.raises(CheckpointError, match="tp_rank: 1, expected 0..0"):
        load_raw_experts(tmp_path, spec, LAYER, tp_rank=1)
    with pytest.raises(CheckpointError, match="layer: -1, expected a layer index >= 0"):
        load_raw_experts(tmp_path, spec, -1)
    with pytest.raises(CheckpointError, match="not a directory"):
        load_raw_experts(tmp_path / "nope", spec, LAYER)
    other = model_from_dict(dict(SPECS["qwen3_moe"], num_experts=16))
    with pytest.raises(CheckpointError, match="field 'num_experts' = 8, but spec tiny-qwen has num_experts = 16"):
        load_raw_experts(tmp_path, other, LAYER)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(CheckpointError, match="model_type 'llama', expected one of gpt_oss"):
        load_raw_experts(tmp_path, spec, LAYER)


@pytest.mark.parametrize("model_type", ["deepseek_v3", "qwen3_moe"])
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_float_experts_in_either_release_format(tmp_path, model_type, fp8):
    """DeepSeek-V3 and Qwen3 ship block-scaled FP8 and BF16 releases; config.json's quantization_config
    says which, and both quantize to the same MXFP4 slices."""
    spec, tensors, truth = write_checkpoint(tmp_path, model_type, fp8=fp8)
    assert any(t.dtype == torch.float8_e4m3fn for t in tensors.values()) == fp8
    raw, _ = load_raw_experts(tmp_path, spec, LAYER)
    for name, value in expected_raw(spec, truth, 0).items():
        assert torch.equal(getattr(raw, name), value), name


@pytest.mark.parametrize("model_type, fp8", [("deepseek_v3", "ue8m0"), ("glm4_moe", "channels")])
def test_the_other_fp8_releases(tmp_path, model_type, fp8):
    """DeepSeek-V3.1 and later declare scale_fmt ue8m0 (block scales that are powers of two, stored as
    F32); GLM-4.5's FP8 releases are compressed-tensors with a scale per output row (weight_scale)."""
    spec, tensors, truth = write_checkpoint(tmp_path, model_type, fp8=fp8)
    assert any(t.dtype == torch.float8_e4m3fn for t in tensors.values())
    raw, _ = load_raw_experts(tmp_path, spec, LAYER)
    for name, value in expected_raw(spec, truth, 0).items():
        assert torch.equal(getattr(raw, name), value), name


def _edit_config(tmp_path, **changes):
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("model_type, changes, layer, message", [
    # a layer the spec does not describe
    ("qwen3_moe", dict(num_experts_per_tok=8), LAYER,
     "config.json: field 'num_experts_per_tok' = 8, but spec tiny-qwen has router.top_k = 2"),
    ("qwen3_moe", dict(norm_topk_prob=None), LAYER,  # transformers' default, false, where the field is absent
     "field 'norm_topk_prob' = False, but spec tiny-qwen has router.renormalize = True"),
    ("deepseek_v4", dict(routed_scaling_factor=2.5), LAYER,
     "field 'routed_scaling_factor' = 2.5, but spec tiny-v4 has router.routed_scaling_factor = 1.5"),
    ("deepseek_v4", dict(swiglu_limit=None), LAYER,
     "field 'swiglu_limit' = None, but spec tiny-v4 has activation.limit = 10.0"),
    ("gpt_oss", dict(swiglu_limit=8.0), LAYER, "field 'swiglu_limit' = 8.0, but spec tiny-oss has activation.limit = 7.0"),
    ("deepseek_v3", dict(scoring_func="softmax"), LAYER, "field 'scoring_func' = 'softmax': expected one of 'sigmoid'"),
    # a layer that is not one of the model's MoE layers
    ("deepseek_v3", dict(), 0, "layer: 0 is a dense MLP, expected a MoE layer: >= 1"),
    ("deepseek_v3", dict(moe_layer_freq=2), LAYER, "layer: 1 is a dense MLP, expected a MoE layer: >= 1 and a multiple of 2"),
    ("deepseek_v3", dict(num_hidden_layers=1), LAYER, "layer: 1, expected 0..0"),
    ("qwen3_moe", dict(num_hidden_layers=1), LAYER, "layer: 1, expected 0..0"),
    ("qwen3_moe", dict(mlp_only_layers=[1]), LAYER, "layer: 1 is a dense MLP"),
    ("qwen3_moe", dict(decoder_sparse_step=4), LAYER, "'decoder_sparse_step' = 4), expected a MoE layer"),
    # experts stored in a format moegen does not read
    ("deepseek_v4", dict(expert_dtype="fp8"), LAYER, "field 'expert_dtype' = 'fp8', expected 'fp4'"),
    ("qwen3_moe", dict(quantization_config=dict(quant_method="awq", bits=4)), LAYER,
     "field 'quantization_config' = {'quant_method': 'awq', 'bits': 4}, expected none (bf16 experts), quant_method 'fp8'"),
    ("deepseek_v3", dict(quantization_config=dict(FP8_QUANTIZATION, weight_block_size=[64, 64])), LAYER,
     "with weight_block_size [128, 128]"),
    ("kimi_k2", dict(quantization_config=dict(quant_method="compressed-tensors", format="pack-quantized")), LAYER,
     "field 'quantization_config' = {'quant_method': 'compressed-tensors', 'format': 'pack-quantized'}, expected "
     "none (bf16 experts), quant_method 'fp8'"),
    ("glm4_moe", dict(quantization_config=dict(FP8_CHANNEL_QUANTIZATION, config_groups=dict(group_0=dict(
        weights=dict(num_bits=8, type="float", strategy="tensor"))))), LAYER,
     "or compressed-tensors float-quantized with 8-bit float per-channel weights"),
    # the models that reuse DeepSeek-V3's layer are checked as it is
    ("kimi_k2", dict(scoring_func=None), LAYER, "field 'scoring_func' = None: expected a string"),
    ("kimi_k2", dict(routed_scaling_factor=2.5), LAYER,
     "field 'routed_scaling_factor' = 2.5, but spec tiny-kimi has router.routed_scaling_factor = 2.827"),
    ("glm4_moe", dict(scoring_func="softmax"), LAYER, "field 'scoring_func' = 'softmax': expected one of 'sigmoid'"),
    ("glm4_moe", dict(hidden_act="gelu"), LAYER, "field 'hidden_act' = 'gelu': expected one of 'silu'"),
    ("glm4_moe", dict(), 0, "layer: 0 is a dense MLP, expected a MoE layer: >= 1"),
    ("glm4_moe", dict(num_hidden_layers=1, num_nextn_predict_layers=1), 2, "layer: 2, expected 0..1"),
])
def test_a_config_that_describes_another_layer_is_refused(tmp_path, model_type, changes, layer, message):
    spec, _, _ = write_checkpoint(tmp_path, model_type, shards=1)
    _edit_config(tmp_path, **changes)
    with pytest.raises(CheckpointError) as excinfo:
        load_raw_experts(tmp_path, spec, layer)
    assert message in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_an_architecture_fixed_field_that_differs_is_named(tmp_path):
    spec, _, _ = write_checkpoint(tmp_path, "gpt_oss", shards=1)
    other = model_from_dict(dict(SPECS["gpt_oss"], activation=dict(kind="swiglu_oai", alpha=1.0, limit=7.0)))
    with pytest.raises(CheckpointError, match=r"activation.alpha = 1.702 \(the gpt_oss architecture's\), but spec "
                                              r"tiny-oss has activation.alpha = 1.0"):
        load_raw_experts(tmp_path, other, LAYER)


@pytest.mark.parametrize("fp8", [False, True])
def test_non_finite_float_experts_are_named(tmp_path, fp8):
    spec, tensors, _ = write_checkpoint(tmp_path, "qwen3_moe", shards=1, fp8=fp8)
    name = f"model.layers.{LAYER}.mlp.experts.1.up_proj.weight"
    bad = tensors[name].clone()
    if fp8:
        bad.view(torch.uint8)[3, 5] = 0x7F  # e4m3fn's NaN
    else:
        bad[3, 5] = float("nan")
    file = next(tmp_path.glob("*.safetensors"))
    save_file({k: (bad if k == name else v).contiguous() for k, v in tensors.items()}, str(file))
    # bf16 at the read, with its place in the whole tensor; FP8 after its block scales
    why = "NaN or inf" if fp8 else r"nan at \[3, 5\], expected finite values"
    with pytest.raises(CheckpointError, match=f"{file.name}: tensor '{name}' holds {why}"):
        load_raw_experts(tmp_path, spec, LAYER)


def test_damaged_indexes_and_stale_copies_are_named(tmp_path):
    spec, tensors, _ = write_checkpoint(tmp_path, "qwen3_moe", shards=2)
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    name = f"model.layers.{LAYER}.mlp.experts.0.gate_proj.weight"
    right = index["weight_map"][name]
    index["weight_map"][name] = next(f for f in set(index["weight_map"].values()) if f != right)
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=f"no tensor '{name}', though the index places it in this file"):
        load_raw_experts(tmp_path, spec, LAYER)
    index["weight_map"][name] = f"sub/{right}"
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"weight_map\['model.layers.1.mlp.experts.0.gate_proj.weight'\] = "
                                              r"'sub/model-0000.-of-00002.safetensors', expected the name of a file"):
        load_raw_experts(tmp_path, spec, LAYER)
    # no index: a stale copy of a tensor beside the checkpoint is refused, not silently preferred
    index_path.unlink()
    save_file({name: torch.zeros_like(tensors[name])}, str(tmp_path / "zzz-stale-copy.safetensors"))
    with pytest.raises(CheckpointError, match=f"tensor '{name}' is in both 'model-0000.-of-00002.safetensors' and "
                                              "'zzz-stale-copy.safetensors'"):
        load_raw_experts(tmp_path, spec, LAYER)


def test_a_truncated_shard_is_a_one_line_error(tmp_path):
    spec, _, _ = write_checkpoint(tmp_path, "qwen3_moe", shards=1)
    shard = next(tmp_path.glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:-4096])
    with pytest.raises(CheckpointError) as excinfo:
        load_raw_experts(tmp_path, spec, LAYER)
    assert str(shard) in str(excinfo.value) and "\n" not in str(excinfo.value)


PUBLISHED = {"deepseek-v4-flash": ("layers.3.ffn.experts.0.w1.weight", "I8 or U8"),
             "deepseek-v3": ("model.layers.3.mlp.experts.0.gate_proj.weight", "F8_E4M3"),
             "gpt-oss-120b": ("model.layers.3.mlp.experts.gate_up_proj_blocks", "U8"),
             "gpt-oss-20b": ("model.layers.3.mlp.experts.gate_up_proj_blocks", "U8"),
             "qwen3-30b-a3b": ("model.layers.3.mlp.experts.0.gate_proj.weight", "BF16")}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_published_configs_pass_the_checks_with_the_shipped_specs(tmp_path, model):
    """The published config.json (tests/data/hf_configs) with the shipped spec, and a split of it: the
    loader's checks pass and it goes on to read the experts in the release's format (none are here)."""
    from pathlib import Path
    from moegen.spec import load_model
    config = Path(__file__).parent / "data" / "hf_configs" / f"{model}.json"
    (tmp_path / "config.json").write_text(config.read_text())
    save_file({"unrelated": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    first, dtypes = PUBLISHED[model]
    for spec in (load_model(model), load_model(model).with_parallel(tp_size=2)):
        with pytest.raises(CheckpointError, match=f"no tensor '{first}' \\(expected {dtypes} "):
            load_raw_experts(tmp_path, spec, 3)
    if model == "deepseek-v3":
        with pytest.raises(CheckpointError, match="layer: 2 is a dense MLP, expected a MoE layer: >= 3"):
            load_raw_experts(tmp_path, load_model(model), 2)


UNSHIPPED = {"glm-4.6": ("model.layers.3.mlp.experts.0.gate_proj.weight", "BF16 or F16 or F32", 2),
             "glm-4.5-air": ("model.layers.3.mlp.experts.0.gate_proj.weight", "BF16 or F16 or F32", 0),
             "kimi-k2-instruct": ("model.layers.3.mlp.experts.0.gate_proj.weight", "F8_E4M3", 0),
             "deepseek-v3.2": ("model.layers.3.mlp.experts.0.gate_proj.weight", "F8_E4M3", 2),
             "minimax-m2": ("model.layers.3.block_sparse_moe.experts.0.w1.weight", "F8_E4M3", None)}


@pytest.mark.parametrize("model", sorted(UNSHIPPED))
def test_published_configs_of_models_without_a_shipped_spec(tmp_path, model):
    """A published config.json of a model moegen ships no spec for, with the spec `moegen spec
    --from-config` writes from it: the loader's checks pass and it reads the release's format."""
    from pathlib import Path
    from moegen.hf_config import spec_from_config
    config = Path(__file__).parent / "data" / "hf_configs" / "unshipped" / f"{model}.json"
    (tmp_path / "config.json").write_text(config.read_text())
    save_file({"unrelated": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    first, dtypes, dense_layer = UNSHIPPED[model]
    spec = spec_from_config(config)
    for s in (spec, spec.with_parallel(tp_size=2, ep_size=8, ep_rank=0)):
        with pytest.raises(CheckpointError, match=f"no tensor '{first}' \\(expected {dtypes} "):
            load_raw_experts(tmp_path, s, 3)
    if dense_layer is not None:  # below first_k_dense_replace
        with pytest.raises(CheckpointError, match=f"layer: {dense_layer} is a dense MLP"):
            load_raw_experts(tmp_path, spec, dense_layer)
    else:  # every layer is a MoE one
        with pytest.raises(CheckpointError, match=f"no tensor '{first.replace('.3.', '.0.')}'"):
            load_raw_experts(tmp_path, spec, 0)


def test_deepseeks_mtp_layer_loads_and_an_empty_config_is_checked(tmp_path):
    """DeepSeek's multi-token-prediction layer follows the num_hidden_layers decoder layers (a MoE layer
    too); a config.json that is present is checked even when it is empty."""
    spec, _, _ = write_checkpoint(tmp_path, "deepseek_v3", shards=1)
    _edit_config(tmp_path, num_hidden_layers=1, num_nextn_predict_layers=1)
    raw, _ = load_raw_experts(tmp_path, spec, LAYER)
    assert raw.w13.shape[0] == spec.local_experts
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="config.json: field 'scoring_func' = None: expected a string"):
        load_raw_experts(tmp_path, spec, LAYER, model_type="deepseek_v3")


def test_a_stale_index_entry_for_the_hash_table_is_named(tmp_path):
    spec, tensors, _ = write_checkpoint(tmp_path, "deepseek_v4")
    extra = {k.replace(f"layers.{LAYER}.", "layers.0."): v for k, v in tensors.items()
             if k.startswith(f"layers.{LAYER}.ffn.experts") or k.endswith("gate.weight")}
    save_file({k: v.contiguous() for k, v in extra.items()}, str(tmp_path / "layer0.safetensors"))
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"].update((k, "layer0.safetensors") for k in extra)
    name = "layers.0.ffn.gate.tid2eid"
    index["weight_map"][name] = next(f for f in set(index["weight_map"].values()) if f != index["weight_map"][name])
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=f"no tensor '{name}', though the index places it in this file"):
        load_raw_experts(tmp_path, spec, 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("model_type", ["deepseek_v3", "qwen3_moe"])
def test_float_experts_quantize_on_the_gpu_to_the_same_bits(tmp_path, model_type):
    spec, _, _ = write_checkpoint(tmp_path, model_type)
    spec = spec.with_parallel(tp_size=2)
    for tp_rank in range(2):
        on_cpu, _ = load_raw_experts(tmp_path, spec, LAYER, tp_rank=tp_rank)
        on_gpu, _ = load_raw_experts(tmp_path, spec, LAYER, tp_rank=tp_rank, device="cuda")
        for name in ("w13", "s13", "w2", "s2"):
            got = getattr(on_gpu, name)
            assert got.is_cuda and torch.equal(got.cpu(), getattr(on_cpu, name)), (name, tp_rank)


def test_a_bad_device_is_a_one_line_error(tmp_path):
    spec, _, _ = write_checkpoint(tmp_path, "qwen3_moe", shards=1)
    with pytest.raises(CheckpointError, match="device: 'gpu0', expected a torch device"):
        load_raw_experts(tmp_path, spec, LAYER, device="gpu0")


def _resave(tmp_path, tensors):
    for f in tmp_path.glob("*.safetensors"):
        f.unlink()
    (tmp_path / "model.safetensors.index.json").unlink(missing_ok=True)
    save_file({k: v.contiguous().clone() for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))


@pytest.mark.parametrize("tensor, at, value, message", [
    ("experts.gate_up_proj_bias", (2, 5), float("nan"), r"holds nan at \[2, 5\], expected finite values"),
    ("experts.down_proj_bias", (1, 0), float("inf"), r"holds inf at \[1, 0\], expected finite values"),
    ("router.weight", (0, 0), float("nan"), r"holds nan at \[0, 0\], expected finite values"),
    ("experts.gate_up_proj_scales", (5, 17, 1), 255, r"holds the e8m0 scale 255 \(NaN\) at \[5, 17, 1\]"),
    ("experts.down_proj_scales", (6, 3, 0), 255, r"holds the e8m0 scale 255 \(NaN\) at \[6, 3, 0\]"),
])
def test_non_finite_biases_routers_and_scales_are_named_where_the_checkpoint_has_them(tmp_path, tensor, at, value,
                                                                                       message):
    """NaN in a bias, a router or a scale would make every token routed there NaN: named in the
    checkpoint's own indices (expert 5 and 6 are EP rank 1's of two)."""
    spec, tensors, _ = write_checkpoint(tmp_path, "gpt_oss", shards=1)
    name = f"model.layers.{LAYER}.mlp.{tensor}"
    tensors[name] = tensors[name].clone()
    tensors[name][at] = value
    _resave(tmp_path, tensors)
    rank = spec.with_parallel(ep_size=2, ep_rank=1) if "scales" in tensor else spec
    with pytest.raises(CheckpointError, match=f"model.safetensors: tensor '{re.escape(name)}' {message}"):
        load_raw_experts(tmp_path, rank, LAYER)


def test_a_hash_table_naming_experts_outside_the_layer_is_refused(tmp_path):
    spec, tensors, _ = write_checkpoint(tmp_path, "deepseek_v4", shards=1)
    name = "layers.0.ffn.gate.tid2eid"
    extra = {k.replace(f"layers.{LAYER}.", "layers.0."): v for k, v in tensors.items()
             if k.startswith(f"layers.{LAYER}.ffn.experts") or k.endswith("gate.weight")}
    table = tensors[name].clone()
    table[7, 1] = spec.num_experts
    _resave(tmp_path, {**tensors, **extra, name: table})
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' holds expert {spec.num_experts} at \[7, 1\], "
                                              rf"expected 0..{spec.num_experts - 1}"):
        load_raw_experts(tmp_path, spec, 0)
    _resave(tmp_path, {**tensors, **extra, name: torch.tensor(3, dtype=torch.int32)})
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' has shape \(\), expected \[vocabulary, top_k\]"):
        load_raw_experts(tmp_path, spec, 0)


def test_a_bad_layout_or_device_is_refused_before_the_load(tmp_path, monkeypatch):
    spec, _, _ = write_checkpoint(tmp_path, "qwen3_moe", shards=1)
    monkeypatch.setattr("moegen.checkpoint.quantize", lambda w: pytest.fail("the load ran"))
    with pytest.raises(CheckpointError, match="layout: 'sm90_e2m1_atom46', expected one of sm90_e2m1_atom64"):
        load_experts(tmp_path, spec, LAYER, layout="sm90_e2m1_atom46")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(CheckpointError, match=f"device: 'cuda:{count}', expected cpu or one of the {count} CUDA"):
        load_raw_experts(tmp_path, spec, LAYER, device=f"cuda:{count}")


@pytest.mark.parametrize("model_type, changes, message", [
    ("qwen3_moe", dict(num_hidden_layers=0), "field 'num_hidden_layers' = 0, expected an integer >= 1"),
    ("qwen3_moe", dict(decoder_sparse_step=0), "field 'decoder_sparse_step' = 0, expected an integer >= 1"),
    ("qwen3_moe", dict(mlp_only_layers=["1"]), r"field 'mlp_only_layers' = \['1'\], expected a list of layer"),
    ("deepseek_v3", dict(moe_layer_freq=0), "field 'moe_layer_freq' = 0, expected an integer >= 1"),
    ("gpt_oss", dict(quantization_config=None), "field 'quantization_config' = None, expected gpt-oss's mxfp4"),
])
def test_config_fields_that_say_which_layers_are_moe_or_how_experts_are_stored_are_checked(tmp_path, model_type, changes, message):
    spec, _, _ = write_checkpoint(tmp_path, model_type, shards=1)
    _edit_config(tmp_path, **changes)
    with pytest.raises(CheckpointError, match=message):
        load_raw_experts(tmp_path, spec, LAYER)
