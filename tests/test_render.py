"""Rendering: StrictUndefined everywhere, spec constants in problem.h, tiles in the GEMM source,
valid JSON build info in the layer source."""
import json
import re

import jinja2
import pytest

from moegen import render
from moegen.config_space import KernelConfig, default_configs
from moegen.spec import load_model

GEMM_VARS = dict(name="moegen_sm90_gemm1_m64n16k64s3", gemm="gemm1", variant="tiny", epilogue="SwigluEpilogue",
                 block_m=64, block_n=16, block_k=64, stages=3, gemm_n=256, gemm_k=256)


def constants(header: str) -> dict[str, str]:
    """`static constexpr <type> kName = value;` -> {kName: value}"""
    return dict(re.findall(r"static constexpr \w+ (k\w+) = ([^;]+);", header))


def build_info_of(source: str) -> dict:
    m = re.search(r'R"moegen\((.*?)\)moegen"', source, re.S)
    assert m, "no raw-string build info literal"
    return json.loads(m.group(1))


# --- strict undefined -------------------------------------------------------------------------------------

def test_environment_is_strict():
    env = render.environment()
    assert env.undefined is jinja2.StrictUndefined
    assert env.autoescape is False


def test_gemm_template_renders_with_all_variables():
    text = render.render("gemm_kernel.cu.j2", **GEMM_VARS)
    assert "TileShape<64, 16, 64, 3>" in text


@pytest.mark.parametrize("missing", sorted(GEMM_VARS))
def test_missing_variable_raises(missing):
    variables = {k: v for k, v in GEMM_VARS.items() if k != missing}
    with pytest.raises(jinja2.UndefinedError, match=missing):
        render.render("gemm_kernel.cu.j2", **variables)


@pytest.mark.parametrize("body", ["value: {{ nope }}\n", "{% if nope %}x{% endif %}\n",
                                  "{% for k in nope %}{{ k }}{% endfor %}\n", "{{ known.missing_attr }}\n"])
def test_undefined_name_in_any_template_dir_raises(tmp_path, body):
    (tmp_path / "t.j2").write_text(body)
    (tmp_path / "ok.j2").write_text("value: {{ known.x }}\n")
    assert render.render("ok.j2", template_dir=tmp_path, known={"x": 3}) == "value: 3\n"
    with pytest.raises(jinja2.UndefinedError):
        render.render("t.j2", template_dir=tmp_path, known={"x": 3})


def test_environment_cached_per_template_dir(tmp_path):
    assert render.environment(tmp_path) is render.environment(tmp_path)
    assert render.environment(tmp_path) is not render.environment(render.TEMPLATE_DIR)
    assert render.environment(tmp_path).undefined is jinja2.StrictUndefined


# --- problem.h --------------------------------------------------------------------------------------------

def test_problem_header_deepseek_v4_flash():
    spec = load_model("deepseek-v4-flash")
    text = render.problem_header(spec)
    assert "from deepseek-v4-flash.yaml" in text
    k = constants(text)
    assert k["kHidden"] == "4096"
    assert k["kTopK"] == "6"
    assert k["kExperts"] == "256" and k["kLocalExperts"] == "256" and k["kExpertBegin"] == "0"
    assert k["kInter"] == "2048"
    assert k["kRouter"] == "moegen::kSigmoidGroupTopK"
    assert k["kGroups"] == "8" and k["kTopKGroups"] == "4"
    assert k["kGroupScore"] == "moegen::kGroupMax"
    assert k["kScoreBias"] == "true"
    assert k["kRenormalize"] == "true"
    assert k["kScaling"] == "1.0f"
    assert k["kActivation"] == "moegen::kSwiGLU"
    assert k["kHasLimit"] == "true" and k["kLimit"] == "10.0f"
    assert k["kBias13"] == "false" and k["kBias2"] == "false"
    assert "{{" not in text and "}}" not in text


def test_problem_header_gpt_oss_120b():
    k = constants(render.problem_header(load_model("gpt-oss-120b")))
    assert k["kActivation"] == "moegen::kSwiGLUOai"
    assert k["kBias13"] == "true" and k["kBias2"] == "true"
    assert k["kAlpha"] == "1.702f" and k["kLimit"] == "7.0f"
    assert k["kRouter"] == "moegen::kTopKSoftmax"
    assert k["kHidden"] == "2880" and k["kTopK"] == "4"


def test_problem_header_deepseek_v3_and_qwen():
    k = constants(render.problem_header(load_model("deepseek-v3")))
    assert k["kGroupScore"] == "moegen::kGroupTop2Sum" and k["kScaling"] == "2.5f"
    k = constants(render.problem_header(load_model("qwen3-30b-a3b")))
    assert k["kRouter"] == "moegen::kSoftmaxTopK"
    assert k["kScoreBias"] == "false"
    assert k["kHasLimit"] == "false"


def test_problem_header_parallel_split():
    spec = load_model("qwen3-30b-a3b").with_parallel(tp_size=2, ep_size=4, ep_rank=3)
    k = constants(render.problem_header(spec))
    assert k["kExperts"] == "128"  # router sees all experts
    assert k["kLocalExperts"] == "32" and k["kExpertBegin"] == "96"
    assert k["kInter"] == "384"


# --- GEMM and layer sources -------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg, epilogue, n, k", [
    (KernelConfig("sm90", "gemm1", 64, 16, 64, 8), "SwigluEpilogue", 2880, 2880),
    (KernelConfig("sm90", "gemm2", 128, 128, 64, 4), "WeightedEpilogue", 2880, 1440),
])
def test_gemm_source(cfg, epilogue, n, k):
    spec = load_model("gpt-oss-20b").with_parallel(tp_size=2)
    text = render.gemm_source(spec, cfg)
    tile = f"TileShape<{cfg.block_m}, {cfg.block_n}, {cfg.block_k}, {cfg.stages}>"
    assert tile in text
    m = re.search(r"GroupedGemm<sm90::TileShape<(\d+), (\d+), (\d+), (\d+)>,\s*(\d+), (\d+), Epilogue>", text)
    assert m and tuple(map(int, m.groups())) == (cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, n, k)
    assert f'extern "C" int {cfg.name}_launch(' in text
    assert f"moegen::{epilogue}<Problem>" in text
    assert "gpt-oss-20b-tp2" in text
    assert '#include "problem.h"' in text


def test_layer_source_build_info_and_kernel_table():
    spec = load_model("deepseek-v4-flash")
    configs = default_configs(spec, "sm90")
    info = {"fingerprint": "abc", "spec": spec.to_dict(), "kernels": [c.name for c in configs],
            "note": 'quotes " and backslashes \\ and )moegen without the quote'}
    text = render.layer_source(spec, "sm90", configs, info)
    assert build_info_of(text) == info
    for c in configs:
        assert f'extern "C" int {c.name}_launch(const sm90::GemmParams*, int, int, cudaStream_t);' in text
        assert f'{{"{c.name}", {c.gemm[-1]}, {c.block_n}, {c.name}_launch}},' in text
    # Table order is the config order: the runtime indexes kernels by position.
    positions = [text.index(f'{{"{c.name}"') for c in configs]
    assert positions == sorted(positions)
    assert "deepseek-v4-flash (sm90)" in text


def test_layer_source_build_info_survives_raw_string_delimiter():
    # JSON escapes '"', so ')moegen"' in a value never closes the C++ raw string early.
    spec = load_model("qwen3-30b-a3b")
    info = {"x": ')moegen"', "y": [1, 2.5, None, True]}
    text = render.layer_source(spec, "sm90", default_configs(spec, "sm90"), info)
    assert build_info_of(text) == info
    assert text.count(')moegen"') == 1
