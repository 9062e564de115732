"""Rendering: StrictUndefined everywhere, spec constants in the layer's Problem, tile, register plan
and epilogue constants in the GEMM source (and nothing model-specific beyond them), valid JSON
build info in its own translation unit."""
import json
import re

import jinja2
import pytest

from moegen import render
from moegen.arch import get_arch
from moegen.naming import KernelConfig
from moegen.spec import load_model

GEMM_VARS = dict(name="moegen_sm90_gemm1_m64n16k64s3", arch="sm90", hidden=256, intermediate_local=128,
                 activation_enum="kSwiGLU", has_limit="false", limit="0.0", alpha="1.0", bias13="false",
                 bias2="false", epilogue="SwigluEpilogue", block_m=64, block_n=16, block_k=64, stages=3,
                 min_blocks_per_sm=4, producer_registers=0, consumer_registers=0, gemm_n=256, gemm_k=256,
                 gemm_n_padded=256, gemm_k_padded=256, weight_layout="sm90_e2m1_atom64", fp8_activations="false",
                 activation_type="bfloat16_t", full_width_loop="false", step_k=64, expert_progress="true",
                 tile_loop="false", launch_fn="moegen::GemmLaunchFn")


def default_configs(spec, arch):
    return get_arch(arch).fallback_configs(spec)


def problem_of(spec) -> str:
    return render.layer_source(spec, "sm90", default_configs(spec, "sm90"))


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
    assert re.search(r"TileShape<\s*64,\s*16,\s*64,\s*3,\s*4,", text)


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


# --- the layer's Problem --------------------------------------------------------------------------------

def test_problem_deepseek_v4_flash():
    spec = load_model("deepseek-v4-flash")
    text = problem_of(spec)
    k = constants(text)
    assert k["kHidden"] == "4096"
    assert k["kTopK"] == "6"
    assert k["kExperts"] == "256" and k["kLocalExperts"] == "256" and k["kExpertBegin"] == "0"
    assert k["kInter"] == "2048"
    assert k["kRouter"] == "moegen::kSqrtSoftplusTopK"
    assert k["kGroups"] == "1" and k["kTopKGroups"] == "1"
    assert k["kScoreBias"] == "true"
    assert k["kRenormalize"] == "true"
    assert k["kScaling"] == "1.5f"
    assert k["kBias13"] == "false" and k["kBias2"] == "false"
    assert "{{" not in text and "}}" not in text


def test_problem_gpt_oss_120b():
    k = constants(problem_of(load_model("gpt-oss-120b")))
    assert k["kBias13"] == "true" and k["kBias2"] == "true"
    assert k["kRouter"] == "moegen::kTopKSoftmax"
    assert k["kHidden"] == "2880" and k["kTopK"] == "4"


def test_problem_deepseek_v3_and_qwen():
    k = constants(problem_of(load_model("deepseek-v3")))
    assert k["kRouter"] == "moegen::kSigmoidGroupTopK" and k["kGroups"] == "8" and k["kTopKGroups"] == "4"
    assert k["kGroupScore"] == "moegen::kGroupTop2Sum" and k["kScaling"] == "2.5f"
    k = constants(problem_of(load_model("qwen3-30b-a3b")))
    assert k["kRouter"] == "moegen::kSoftmaxTopK"
    assert k["kScoreBias"] == "false"


def test_problem_parallel_split():
    spec = load_model("qwen3-30b-a3b").with_parallel(tp_size=2, ep_size=4, ep_rank=3)
    k = constants(problem_of(spec))
    assert k["kExperts"] == "128"  # router sees all experts
    assert k["kLocalExperts"] == "32" and k["kExpertBegin"] == "96"
    assert k["kInter"] == "384"


# --- GEMM and layer sources -------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg, epilogue, n, k, n_pad, k_pad", [
    (KernelConfig("sm90", "gemm1", 64, 16, 64, 8), "SwigluEpilogue", 2880, 2880, 2944, 2880),
    (KernelConfig("sm90", "gemm2", 128, 128, 64, 4), "WeightedEpilogue", 2880, 1440, 2944, 1472),
])
def test_gemm_source(cfg, epilogue, n, k, n_pad, k_pad):
    spec = load_model("gpt-oss-20b").with_parallel(tp_size=2)
    text = render.gemm_source(spec, cfg)
    m = re.search(r"TileShape<(\d+), (\d+), (\d+), (\d+), (\d+),\s*(\d+), (\d+), (true|false), (\d+),\s*(true|false)>",
                  text)
    r = get_arch("sm90").launch_resources(cfg)
    assert m and tuple(map(int, m.groups()[:7])) == (cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages,
                                                     r["min_blocks_per_sm"], r["producer_registers"],
                                                     r["consumer_registers"])
    assert m[8] == "false"  # no full-width tile loop (W4A8's tile_loop)
    assert int(m[9]) == r["step_k"] == 64  # k64 tiles, and one-warpgroup k128 tiles, step 64 deep
    assert m[10] == "false"  # K loops of 45 and 23 tiles: one CTA per tile
    m = re.search(r"GroupedGemm<Tile, (\d+), (\d+), (\d+), (\d+), Epilogue,\s*cute::bfloat16_t, true>", text)
    assert m and tuple(map(int, m.groups())) == (n, k, n_pad, k_pad)  # every BF16 tile carries the progress code
    assert f'extern "C" moegen::GemmLaunchFn {cfg.name}_launch;' in text  # declared by the header's type
    assert f"arch::{epilogue}<moegen_generated::EpilogueProblem>" in text
    e = constants(text)
    assert (e["kHidden"], e["kInter"], e["kActivation"], e["kAlpha"], e["kLimit"]) == \
        ("2880", "1440", "moegen::kSwiGLUOai", "1.702f", "7.0f")
    assert e["kBias13"] == "true" and e["kBias2"] == "true"
    assert '#include "moegen/sm90/grouped_gemm.cuh"' in text


def test_gemm_source_is_shared_by_models_and_ranks_of_one_shape():
    """Nothing but the GEMM's shape and epilogue enters a kernel's source: gpt-oss-20b and -120b,
    and every EP rank of a model, compile the same objects."""
    cfg = KernelConfig("sm90", "gemm1", 64, 8, 64, 4)
    a, b = load_model("gpt-oss-20b"), load_model("gpt-oss-120b")
    assert render.gemm_source(a, cfg) == render.gemm_source(b, cfg)
    v3 = load_model("deepseek-v3")
    assert render.gemm_source(v3, cfg) == render.gemm_source(v3.with_parallel(ep_size=8, ep_rank=5), cfg)
    assert render.gemm_source(a, cfg) != render.gemm_source(a.with_parallel(tp_size=2), cfg)


def test_layer_source_kernel_table():
    spec = load_model("deepseek-v4-flash")
    configs = default_configs(spec, "sm90")
    text = render.layer_source(spec, "sm90", configs)
    for c in configs:
        assert f'extern "C" moegen::GemmLaunchFn {c.name}_launch;' in text
        assert re.search(rf'{{"{c.name}",\s*{c.gemm[-1]},\s*{c.block_n},\s*true,\s*'
                         rf'reinterpret_cast<const void\*>\({c.name}_launch\)}},', text)
    # Table order is the config order: the runtime indexes kernels by position.
    positions = [text.index(f'{{"{c.name}"') for c in configs]
    assert positions == sorted(positions)
    assert "deepseek-v4-flash (sm90)" in text and '#include "moegen/sm90/pipeline.cuh"' in text


def test_w4a8_kernels_carry_the_progress_code_only_at_one_weight_slice():
    """The layer follows GEMM1 per expert only with kernels that carry the code (KernelEntry), and the
    kernel's template gets the same answer: W4A8 tiles of 64 weight rows (the decode picks) do, wider
    ones (m256n64k128s4_fp8 spilled with it) do not."""
    spec = load_model("deepseek-v4-flash").with_activations("fp8")
    policy = get_arch("sm90", "fp8")
    small, wide = policy.config("gemm1", 64, 8, 128, 4), policy.config("gemm1", 256, 64, 128, 4)
    assert policy.expert_progress(small) and not policy.expert_progress(wide)
    assert "cute::float_e4m3_t, true>" in render.gemm_source(spec, small)
    assert "cute::float_e4m3_t, false>" in render.gemm_source(spec, wide)
    text = render.layer_source(spec, "sm90", [small, wide])
    assert f'{{"{small.name}", 1, 8, true,' in text and f'{{"{wide.name}", 1, 64, false,' in text
    assert not get_arch("sm100").expert_progress(get_arch("sm100").fallback_configs(load_model("deepseek-v4-flash"))[0])


def test_build_info_source():
    spec = load_model("deepseek-v4-flash")
    info = {"fingerprint": "abc", "spec": spec.to_dict(), "kernels": ["k"],
            "note": 'quotes " and backslashes \\ and )moegen without the quote'}
    assert build_info_of(render.build_info_source(info)) == info


def test_build_info_survives_raw_string_delimiter():
    # JSON escapes '"', so ')moegen"' in a value never closes the C++ raw string early.
    info = {"x": ')moegen"', "y": [1, 2.5, None, True]}
    text = render.build_info_source(info)
    assert build_info_of(text) == info
    assert text.count(')moegen"') == 1
