"""Render kernel sources from the Jinja templates: one environment, StrictUndefined everywhere.

Every value a template receives is an integer, a C++ literal made here, an enum name from a fixed
table, or a validated name (moegen.spec.NAME_PATTERN): nothing from a file is pasted into C++.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import jinja2

from .arch import get_arch, policy_of
from .layout import get_layout
from .naming import KernelConfig
from .paths import TEMPLATE_DIR
from .problem import gemm_shapes, max_tokens
from .spec import ModelSpec

INCLUDE_DIR = TEMPLATE_DIR / "include"

_ROUTER_ENUM = {"sigmoid_group_topk": "kSigmoidGroupTopK", "sqrtsoftplus_topk": "kSqrtSoftplusTopK",
                "softmax_topk": "kSoftmaxTopK", "topk_softmax": "kTopKSoftmax"}
_GROUP_SCORE_ENUM = {"max": "kGroupMax", "top2_sum": "kGroupTop2Sum"}
_ACTIVATION_ENUM = {"swiglu": "kSwiGLU", "swiglu_oai": "kSwiGLUOai"}
_EPILOGUE = {"gemm1": "SwigluEpilogue", "gemm2": "WeightedEpilogue"}


@lru_cache(maxsize=None)
def environment(template_dir: Path = TEMPLATE_DIR) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(template_dir)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                              autoescape=False)


def render(template: str, template_dir: Path = TEMPLATE_DIR, **variables) -> str:
    return environment(template_dir).get_template(template).render(**variables)


def _cpp_float(x: float) -> str:
    return repr(float(x))


def _cpp_bool(b: bool) -> str:
    return "true" if b else "false"


def gemm_source(spec: ModelSpec, cfg: KernelConfig) -> str:
    arch = policy_of(cfg)
    layout = get_layout(arch.weight_layout)
    shape = gemm_shapes(spec)[cfg.gemm]
    n_pad, k_pad = layout.padded(shape.n, shape.k)
    a = spec.activation
    return render(arch.gemm_template, name=cfg.name, arch=arch.name,
                  hidden=spec.hidden_size, intermediate_local=spec.local_intermediate,
                  activation_enum=_ACTIVATION_ENUM[a.kind], has_limit=_cpp_bool(a.limit is not None),
                  limit=_cpp_float(a.limit if a.limit is not None else 0.0), alpha=_cpp_float(a.alpha),
                  bias13=_cpp_bool(spec.gemm1_bias), bias2=_cpp_bool(spec.gemm2_bias),
                  epilogue=_EPILOGUE[cfg.gemm], block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k,
                  stages=cfg.stages, **arch.launch_resources(cfg), gemm_n=shape.n, gemm_k=shape.k,
                  gemm_n_padded=n_pad, gemm_k_padded=k_pad, weight_layout=layout.name,
                  fp8_activations=_cpp_bool(cfg.fp8), activation_type="float_e4m3_t" if cfg.fp8 else "bfloat16_t",
                  full_width_loop=_cpp_bool(cfg.tile_loop), tile_loop=_cpp_bool(arch.persistent_tile_loop(cfg, shape)),
                  expert_progress=_cpp_bool(arch.expert_progress(cfg)), launch_fn=arch.launch_fn)


def layer_source(spec: ModelSpec, arch: str, configs: list[KernelConfig]) -> str:
    r, a = spec.router, spec.activation
    policy = get_arch(arch, spec.activations)
    kernels = [dict(name=c.name, gemm_index=int(c.gemm[-1]), block_n=c.block_n,
                    expert_progress=_cpp_bool(policy.expert_progress(c))) for c in configs]
    return render("layer.cu.j2", variant=spec.variant, arch=arch, kernels=kernels, launch_fn=policy.launch_fn,
                  num_experts=spec.num_experts, local_experts=spec.local_experts, expert_begin=spec.expert_begin,
                  top_k=r.top_k, hidden=spec.hidden_size, intermediate_local=spec.local_intermediate,
                  router_enum=_ROUTER_ENUM[r.kind], n_group=r.n_group, topk_group=r.topk_group,
                  group_score_enum=_GROUP_SCORE_ENUM[r.group_score], renormalize=_cpp_bool(r.renormalize),
                  score_bias=_cpp_bool(r.score_bias), routed_scaling_factor=_cpp_float(r.routed_scaling_factor),
                  activation_enum=_ACTIVATION_ENUM[a.kind], has_limit=_cpp_bool(a.limit is not None),
                  limit=_cpp_float(a.limit if a.limit is not None else 0.0), alpha=_cpp_float(a.alpha),
                  bias13=_cpp_bool(spec.gemm1_bias), bias2=_cpp_bool(spec.gemm2_bias),
                  fp8_activations=_cpp_bool(spec.activations == "fp8"), max_tokens=max_tokens(spec))


def build_info_source(build_info: dict) -> str:
    text = json.dumps(build_info, sort_keys=True)
    # A C++ raw string literal cannot contain its own delimiter; JSON of ours never holds it.
    assert ")moegen\"" not in text
    return render("build_info.cu.j2", build_info_literal=f'R"moegen({text})moegen"')
