"""A model spec from a published Hugging Face `config.json`: the MoE layer's experts, top-k, sizes,
router kind and parameters, activation and its limits, for the architectures moegen serves
(`moegen spec --from-config`).  Anything else is a SpecError naming the file and the field."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable

from .spec import ModelSpec, SpecError, model_from_dict, shown
from .paths import read_small_file

GPT_OSS_ALPHA = 1.702  # fixed in the gpt-oss modelling code, not in config.json


_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "an object"}


class _Config:
    def __init__(self, data: Any, source: str):
        if not isinstance(data, dict):
            raise SpecError(f"{source}: top level = {type(data).__name__}: expected a JSON object (a config.json)")
        self.data, self.source = data, source

    def get(self, key: str, kind: type | tuple, default: Any = ...) -> Any:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        what = " or ".join(_KIND_NAMES[k] for k in kinds)
        if key not in self.data:
            if default is ...:
                raise SpecError(f"{self.source}: field '{key}' = None: expected {what} (field is required)")
            return default
        v = self.data[key]
        if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
            raise SpecError(f"{self.source}: field '{key}' = {shown(v)}: expected {what}")
        return v

    def one_of(self, key: str, allowed: tuple, default: Any = ...) -> Any:
        v = self.get(key, str, default)
        if v not in allowed:
            raise SpecError(f"{self.source}: field '{key}' = {shown(v)}: expected one of {', '.join(map(repr, allowed))} "
                            "(the values moegen's kernels implement)")
        return v


def _deepseek_v4(c: _Config) -> dict:
    c.one_of("scoring_func", ("sqrtsoftplus",))
    c.one_of("topk_method", ("noaux_tc",))
    if c.get("n_group", int, 1) != 1:
        raise SpecError(f"{c.source}: field 'n_group' = {shown(c.data['n_group'])}: expected 1 or absent (DeepSeek-V4 "
                        "selects a plain top-k)")
    limit = c.get("swiglu_limit", (int, float), None)
    return dict(num_experts=c.get("n_routed_experts", int), hidden_size=c.get("hidden_size", int),
                intermediate_size=c.get("moe_intermediate_size", int),
                router=dict(kind="sqrtsoftplus_topk", top_k=c.get("num_experts_per_tok", int), score_bias=True,
                            renormalize=c.get("norm_topk_prob", bool, True),
                            routed_scaling_factor=c.get("routed_scaling_factor", (int, float), 1.0),
                            hash_layers=c.get("num_hash_layers", int, 0)),
                activation=dict(kind="swiglu", limit=limit))  # the spec checks it is a finite number


def _deepseek_v3(c: _Config, router_in_config: bool = True) -> dict:
    """DeepSeek-V3's MoE layer, which DeepSeek-V3.2, Kimi-K2 and GLM-4.5 reuse unchanged."""
    # router_in_config: both router fields are required; else the modelling code fixes them where absent.
    # noaux_tc: scores plus the correction bias choose; groups are scored by their top-2 sum.
    c.one_of("scoring_func", ("sigmoid",), ... if router_in_config else "sigmoid")
    c.one_of("topk_method", ("noaux_tc",), ... if router_in_config else "noaux_tc")
    c.one_of("hidden_act", ("silu",), "silu")
    # The grouping and scaling fields are required of the DeepSeek-V3 types, whose modelling code
    # defaults them (8, 4, 2.5) otherwise than GLM-4.5's (1, 1, 1.0): every published config writes them.
    required = ... if router_in_config else None
    return dict(num_experts=c.get("n_routed_experts", int), hidden_size=c.get("hidden_size", int),
                intermediate_size=c.get("moe_intermediate_size", int),
                router=dict(kind="sigmoid_group_topk", top_k=c.get("num_experts_per_tok", int),
                            n_group=c.get("n_group", int, required or 1),
                            topk_group=c.get("topk_group", int, required or 1),
                            group_score="top2_sum", score_bias=True, renormalize=c.get("norm_topk_prob", bool, True),
                            routed_scaling_factor=c.get("routed_scaling_factor", (int, float), required or 1.0)),
                activation=dict(kind="swiglu"))


def _glm4_moe(c: _Config) -> dict:
    """GLM-4.5's config.json names neither scoring_func nor topk_method: its modelling code (transformers'
    Glm4MoeTopkRouter) is DeepSeek-V3's router."""
    return _deepseek_v3(c, router_in_config=False)


def _minimax_m2(c: _Config) -> dict:
    """MiniMax-M2: DeepSeek-V3's router without expert groups or scaling (sigmoid scores; the bias only
    selects; the chosen scores renormalized), the expert size in intermediate_size, no shared experts."""
    c.one_of("scoring_func", ("sigmoid",))
    c.one_of("hidden_act", ("silu",), "silu")
    if c.get("use_routing_bias", bool) is not True:
        raise SpecError(f"{c.source}: field 'use_routing_bias' = {shown(c.data['use_routing_bias'])}: expected true "
                        "(MiniMax-M2's router selects on score + bias)")
    if c.get("shared_intermediate_size", int, 0):
        raise SpecError(f"{c.source}: field 'shared_intermediate_size' = {shown(c.data['shared_intermediate_size'])}: "
                        "expected 0 or absent (moegen's layer is the routed experts; shared experts are the caller's)")
    return dict(num_experts=c.get("num_local_experts", int), hidden_size=c.get("hidden_size", int),
                intermediate_size=c.get("intermediate_size", int),
                router=dict(kind="sigmoid_group_topk", top_k=c.get("num_experts_per_tok", int), n_group=1, topk_group=1,
                            group_score="top2_sum", score_bias=True, renormalize=True, routed_scaling_factor=1.0),
                activation=dict(kind="swiglu"))


def _gpt_oss(c: _Config) -> dict:
    top_k, also = c.get("num_experts_per_tok", int, None), c.get("experts_per_token", int, None)
    if top_k is not None and also is not None and top_k != also:
        raise SpecError(f"{c.source}: field 'experts_per_token' = {also}, but 'num_experts_per_tok' = {top_k}: "
                        "expected one top-k")
    top_k = c.get("experts_per_token", int) if top_k is None else top_k
    quant = c.get("quantization_config", dict, {})
    if quant and quant.get("quant_method") != "mxfp4":
        raise SpecError(f"{c.source}: field 'quantization_config.quant_method' = {shown(quant.get('quant_method'))}: "
                        "expected 'mxfp4'")
    return dict(num_experts=c.get("num_local_experts", int), hidden_size=c.get("hidden_size", int),
                intermediate_size=c.get("intermediate_size", int), router=dict(kind="topk_softmax", top_k=top_k),
                activation=dict(kind="swiglu_oai", alpha=GPT_OSS_ALPHA,
                                limit=c.get("swiglu_limit", (int, float))),
                bias=dict(gemm1=True, gemm2=True))


def _qwen3_moe(c: _Config) -> dict:
    c.one_of("hidden_act", ("silu",), "silu")
    return dict(num_experts=c.get("num_experts", int), hidden_size=c.get("hidden_size", int),
                intermediate_size=c.get("moe_intermediate_size", int),
                router=dict(kind="softmax_topk", top_k=c.get("num_experts_per_tok", int),
                            renormalize=c.get("norm_topk_prob", bool, False)),
                activation=dict(kind="swiglu"))


MODEL_TYPES: dict[str, Callable[[_Config], dict]] = {
    "deepseek_v4": _deepseek_v4, "deepseek_v3": _deepseek_v3, "gpt_oss": _gpt_oss, "qwen3_moe": _qwen3_moe,
    "deepseek_v32": _deepseek_v3, "kimi_k2": _deepseek_v3, "glm4_moe": _glm4_moe, "minimax_m2": _minimax_m2}


def default_name(path: Path) -> str:
    """A spec name from the model directory's name (DeepSeek-V4-Flash -> deepseek-v4-flash)."""
    # normalized first: config.json given from inside its directory, or as ../x/config.json, has a parent name
    path = Path(os.path.abspath(path))
    stem = path.parent.name if path.name == "config.json" else path.stem
    name = re.sub(r"\.{2,}", ".", re.sub(r"[^a-z0-9._-]+", "-", stem.lower()))
    return name.strip("-._")[:64].rstrip("-._") or "model"  # spec.is_name


def spec_from_config(path: str | Path, name: str | None = None) -> ModelSpec:
    path = Path(path)
    try:
        data = json.loads(read_small_file(path, 1 << 20))
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    except ValueError as e:
        raise SpecError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply, expected a model's config.json") from None
    return spec_from_config_data(data, str(path), name or default_name(path))


def spec_from_config_data(data: Any, source: str, name: str, model_type: str | None = None) -> ModelSpec:
    """The spec a parsed config.json describes; model_type, when given, overrides the file's."""
    c = _Config(data, source)
    model_type = model_type or c.get("model_type", str)
    if model_type not in MODEL_TYPES:
        raise SpecError(f"{source}: field 'model_type' = {shown(model_type)}: expected one of "
                        f"{', '.join(map(repr, MODEL_TYPES))} (the architectures moegen serves)")
    try:
        return model_from_dict(dict(name=name, **MODEL_TYPES[model_type](c)), source)
    except SpecError as e:  # name the config.json's key, which the user can edit, not the spec's field
        raise SpecError(_CONFIG_FIELD.sub(lambda m: _config_field(model_type, m), str(e), count=1)) from None


def config_key(model_type: str, field: str) -> str:
    """The config.json key a spec field (dotted: router.top_k) comes from, or the field where it has none."""
    return _SPEC_FIELD_SOURCES[model_type].get(field, field)


# The config.json key each spec field comes from, where the names differ.
_SPEC_FIELD_SOURCES = {
    "deepseek_v4": {"num_experts": "n_routed_experts", "intermediate_size": "moe_intermediate_size",
                    "router.top_k": "num_experts_per_tok", "router.renormalize": "norm_topk_prob",
                    "router.hash_layers": "num_hash_layers", "router.routed_scaling_factor": "routed_scaling_factor",
                    "activation.limit": "swiglu_limit"},
    "deepseek_v3": {"num_experts": "n_routed_experts", "intermediate_size": "moe_intermediate_size",
                    "router.top_k": "num_experts_per_tok", "router.n_group": "n_group",
                    "router.topk_group": "topk_group", "router.renormalize": "norm_topk_prob",
                    "router.routed_scaling_factor": "routed_scaling_factor"},
    "gpt_oss": {"num_experts": "num_local_experts", "router.top_k": "num_experts_per_tok",
                "activation.limit": "swiglu_limit"},
    "qwen3_moe": {"intermediate_size": "moe_intermediate_size", "router.top_k": "num_experts_per_tok",
                  "router.renormalize": "norm_topk_prob"},
}
_SPEC_FIELD_SOURCES.update({t: _SPEC_FIELD_SOURCES["deepseek_v3"] for t in ("deepseek_v32", "kimi_k2", "glm4_moe")})
_SPEC_FIELD_SOURCES["minimax_m2"] = {"num_experts": "num_local_experts", "router.top_k": "num_experts_per_tok"}
_CONFIG_FIELD = re.compile(r"field '([^']+)'")


def _config_field(model_type: str, m: re.Match) -> str:
    field = m.group(1)
    key = config_key(model_type, field)
    return m.group(0) if key == field else f"field '{key}' (the spec's {field})"


def spec_yaml(spec: ModelSpec, config_path: Path) -> str:
    import yaml
    # escaped where a newline or undecodable byte would leave the comment or the UTF-8 file
    shown_path = str(config_path) if str(config_path).isprintable() else ascii(str(config_path))
    header = (f"# {spec.name}: MoE layer spec written by `moegen spec --from-config {shown_path}`\n"
              "# (fields the config.json does not hold come from the architecture's modelling code).\n")
    return header + yaml.safe_dump(spec.to_dict(), sort_keys=False)
