"""Every shipped spec is its model's published config.json (tests/data/hf_configs), field by field:
`moegen spec --from-config` turns each into the shipped YAML, and bad configs are one-line errors."""
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from moegen import cli
from moegen.hf_config import spec_from_config
from moegen.spec import SpecError, known_models, load_model, model_from_dict

CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def test_every_shipped_model_has_its_config():
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == known_models()


@pytest.mark.parametrize("model", known_models())
def test_shipped_spec_is_the_published_config(model):
    from_config = spec_from_config(CONFIGS / f"{model}.json", name=model)
    shipped = load_model(model)
    assert from_config.to_dict() == shipped.to_dict()


@pytest.mark.parametrize("model, fields", [
    ("deepseek-v4-flash", dict(n_routed_experts=256, num_experts_per_tok=6, hidden_size=4096,
                               moe_intermediate_size=2048, scoring_func="sqrtsoftplus", topk_method="noaux_tc",
                               norm_topk_prob=True, routed_scaling_factor=1.5, swiglu_limit=10.0, num_hash_layers=3)),
    ("deepseek-v3", dict(n_routed_experts=256, num_experts_per_tok=8, hidden_size=7168, moe_intermediate_size=2048,
                         n_group=8, topk_group=4, topk_method="noaux_tc", scoring_func="sigmoid",
                         routed_scaling_factor=2.5, norm_topk_prob=True)),
    ("gpt-oss-120b", dict(num_local_experts=128, num_experts_per_tok=4, hidden_size=2880, intermediate_size=2880,
                          swiglu_limit=7.0)),
    ("gpt-oss-20b", dict(num_local_experts=32, num_experts_per_tok=4, hidden_size=2880, intermediate_size=2880,
                         swiglu_limit=7.0)),
    ("qwen3-30b-a3b", dict(num_experts=128, num_experts_per_tok=8, hidden_size=2048, moe_intermediate_size=768,
                           norm_topk_prob=True)),
])
def test_the_published_values(model, fields):
    """The fixture holds the published values (a second, independent statement of them)."""
    config = json.loads((CONFIGS / f"{model}.json").read_text())
    assert {k: config[k] for k in fields} == fields


def model_dir_with(path, model: str):
    """A model directory at path holding the published config.json of a shipped model."""
    path.mkdir()
    (path / "config.json").write_text((CONFIGS / f"{model}.json").read_text())
    return path


def test_cli_writes_a_spec_that_loads(tmp_path):
    model_dir = model_dir_with(tmp_path / "DeepSeek-V4-Flash", "deepseek-v4-flash")
    out = tmp_path / "spec.yaml"
    result = CliRunner().invoke(cli.main, ["spec", "--from-config", str(model_dir / "config.json"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    spec = load_model(out)
    assert spec.name == "deepseek-v4-flash" and spec.to_dict() == load_model("deepseek-v4-flash").to_dict()
    printed = CliRunner().invoke(cli.main, ["spec", "--from-config", str(model_dir / "config.json")])
    assert model_from_dict(yaml.safe_load(printed.output)).to_dict() == spec.to_dict()


def test_spec_names_and_header_from_any_config_path(tmp_path, monkeypatch):
    """Named by the model directory however the path is written; a path with a newline stays in the comment."""
    monkeypatch.chdir(model_dir_with(tmp_path / "My Model", "gpt-oss-20b"))
    for path in ("config.json", "./config.json", "../My Model/config.json"):
        assert spec_from_config(path).name == "my-model", path
    assert spec_from_config(model_dir_with(tmp_path / "v2..final", "gpt-oss-20b") / "config.json").name == "v2.final"
    odd = model_dir_with(tmp_path / "p\nq", "gpt-oss-20b")
    out = tmp_path / "odd.yaml"
    result = CliRunner().invoke(cli.main, ["spec", "--from-config", str(odd / "config.json"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert load_model(out).name == "p-q" and "'" in out.read_text().splitlines()[0]


@pytest.mark.parametrize("change, message", [
    (dict(model_type="llama"), "field 'model_type' = 'llama': expected one of 'deepseek_v4'"),
    (dict(scoring_func="softmax"), "field 'scoring_func' = 'softmax': expected one of 'sqrtsoftplus'"),
    (dict(n_group=8), "field 'n_group' = 8: expected 1 or absent"),
    (dict(n_routed_experts="256"), "field 'n_routed_experts' = '256': expected an integer"),
    (dict(num_experts_per_tok=None), "field 'num_experts_per_tok' = None: expected an integer"),
    (dict(hidden_size=4100), "field 'hidden_size' = 4100: expected a multiple of 32"),
    (dict(n_routed_experts=-256), "field 'n_routed_experts' (the spec's num_experts) = -256: expected an integer >= 1"),
    (dict(num_experts_per_tok=300), "field 'num_experts_per_tok' (the spec's router.top_k) = 300: expected an integer <= 32"),
    (dict(swiglu_limit=-1.0), "field 'swiglu_limit' (the spec's activation.limit) = -1.0: expected"),
    (dict(swiglu_limit=10 ** 400), "field 'swiglu_limit' (the spec's activation.limit) = <an integer of 1329 bits>: "
                                   "expected a finite number"),
])
def test_bad_configs_are_one_line_errors(tmp_path, change, message):
    config = json.loads((CONFIGS / "deepseek-v4-flash.json").read_text())
    config.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SpecError) as excinfo:
        spec_from_config(path, "x")
    assert message in str(excinfo.value) and str(path) in str(excinfo.value)
    result = CliRunner().invoke(cli.main, ["spec", "--from-config", str(path)])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and message in result.output


def test_missing_field_and_unreadable_file(tmp_path):
    config = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    del config["moe_intermediate_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SpecError, match="field 'moe_intermediate_size' = None: expected an integer .field is required"):
        spec_from_config(path)
    with pytest.raises(SpecError, match="nope.json: cannot read"):
        spec_from_config(tmp_path / "nope.json")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(SpecError, match="top level = list"):
        spec_from_config(tmp_path / "list.json")


UNSHIPPED = CONFIGS / "unshipped"
DEEPSEEK_V3_ROUTER = dict(kind="sigmoid_group_topk", group_score="top2_sum", score_bias=True, renormalize=True,
                          hash_layers=0)


@pytest.mark.parametrize("model, sizes, router", [
    ("glm-4.6", dict(num_experts=160, hidden_size=5120, intermediate_size=1536),
     dict(top_k=8, n_group=1, topk_group=1, routed_scaling_factor=2.5)),
    ("glm-4.5-air", dict(num_experts=128, hidden_size=4096, intermediate_size=1408),
     dict(top_k=8, n_group=1, topk_group=1, routed_scaling_factor=1.0)),
    ("kimi-k2-instruct", dict(num_experts=384, hidden_size=7168, intermediate_size=2048),
     dict(top_k=8, n_group=1, topk_group=1, routed_scaling_factor=2.827)),
    ("deepseek-v3.2", dict(num_experts=256, hidden_size=7168, intermediate_size=2048),
     dict(top_k=8, n_group=8, topk_group=4, routed_scaling_factor=2.5)),
    ("minimax-m2", dict(num_experts=256, hidden_size=3072, intermediate_size=1536),
     dict(top_k=8, n_group=1, topk_group=1, routed_scaling_factor=1.0)),
])
def test_models_that_reuse_deepseek_v3s_layer(model, sizes, router):
    """GLM-4.5 and later (glm4_moe), Kimi-K2 (kimi_k2) and DeepSeek-V3.2 (deepseek_v32) publish DeepSeek-V3's
    MoE layer under their own model types; GLM's config.json omits the router's scoring fields.  MiniMax-M2
    (minimax_m2) has its router without groups or scaling, and its expert size in intermediate_size."""
    spec = spec_from_config(UNSHIPPED / f"{model}.json")
    d = spec.to_dict()
    assert spec.name == model and {k: d[k] for k in sizes} == sizes
    assert d["router"] == dict(DEEPSEEK_V3_ROUTER, **router)
    assert d["activation"] == dict(kind="swiglu", limit=None, alpha=1.0) and not any(d["bias"].values())


def test_a_model_with_a_shipped_models_layer_gets_its_table():
    """Dispatch tables are keyed by the problem, not the model: DeepSeek-V3.2's layer is DeepSeek-V3's."""
    from moegen.problem import ProblemKey
    v32 = spec_from_config(UNSHIPPED / "deepseek-v3.2.json")
    assert ProblemKey.of(v32) == ProblemKey.of(load_model("deepseek-v3"))
    assert ProblemKey.of(v32.with_parallel(ep_size=8)) == ProblemKey.of(load_model("deepseek-v3").with_parallel(ep_size=8))


@pytest.mark.parametrize("model_type, change, message", [
    ("glm4_moe", dict(scoring_func="softmax"), "field 'scoring_func' = 'softmax': expected one of 'sigmoid'"),
    ("glm4_moe", dict(topk_method="greedy"), "field 'topk_method' = 'greedy': expected one of 'noaux_tc'"),
    ("kimi_k2", dict(scoring_func=None), "field 'scoring_func' = None: expected a string (field is required)"),
    ("deepseek_v32", dict(hidden_act="gelu"), "field 'hidden_act' = 'gelu': expected one of 'silu'"),
    ("kimi_k2", dict(n_group=5), "field 'n_group' (the spec's router.n_group) = 5: expected a divisor of num_experts"),
    ("minimax_m2", dict(use_routing_bias=False), "field 'use_routing_bias' = False: expected true"),
    ("minimax_m2", dict(shared_intermediate_size=1536), "field 'shared_intermediate_size' = 1536: expected 0 or absent"),
    ("minimax_m2", dict(scoring_func="softmax"), "field 'scoring_func' = 'softmax': expected one of 'sigmoid'"),
    ("minimax_m2", dict(num_local_experts=None), "field 'num_local_experts' = None: expected an integer"),
    # DeepSeek-V3's modelling code defaults these otherwise than GLM-4.5's: required, never guessed
    ("kimi_k2", dict(n_group=None), "field 'n_group' = None: expected an integer (field is required)"),
    ("deepseek_v32", dict(routed_scaling_factor=None), "field 'routed_scaling_factor' = None: expected"),
])
def test_bad_configs_of_those_models(tmp_path, model_type, change, message):
    name = {"glm4_moe": "glm-4.6", "kimi_k2": "kimi-k2-instruct", "deepseek_v32": "deepseek-v3.2",
            "minimax_m2": "minimax-m2"}[model_type]
    config = json.loads((UNSHIPPED / f"{name}.json").read_text())
    assert config["model_type"] == model_type
    config.update(change)
    config = {k: v for k, v in config.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SpecError) as excinfo:
        spec_from_config(path, "x")
    assert message in str(excinfo.value) and str(path) in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_gpt_oss_with_two_different_top_ks_is_refused(tmp_path):
    config = json.loads((CONFIGS / "gpt-oss-120b.json").read_text())
    config.update(num_experts_per_tok=4, experts_per_token=2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SpecError, match="field 'experts_per_token' = 2, but 'num_experts_per_tok' = 4: expected one"):
        spec_from_config(path, "x")
