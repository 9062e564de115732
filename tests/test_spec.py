"""Spec loading and validation: shipped specs load, specs are frozen and round-trip through to_dict,
and every bad file gives a SpecError naming the file, the (dotted) field, the bad value and what was
expected."""
import copy
import dataclasses
import time

import pytest
import yaml

from moegen.spec import CONFIG_DIR, ModelSpec, SpecError, known_models, load_model, model_from_dict

TINY = {
    "name": "tiny",
    "num_experts": 8,
    "hidden_size": 256,
    "intermediate_size": 128,
    "router": {"kind": "softmax_topk", "top_k": 2},
    "activation": {"kind": "swiglu"},
}

GROUPED = {
    "name": "grouped",
    "num_experts": 16,
    "hidden_size": 256,
    "intermediate_size": 128,
    "router": {"kind": "sigmoid_group_topk", "top_k": 4, "n_group": 4, "topk_group": 2, "score_bias": True},
    "activation": {"kind": "swiglu", "limit": 10.0},
}

def write(tmp_path, data, name="model.yaml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def assert_spec_error(excinfo, path, field, value_repr, expected):
    msg = str(excinfo.value)
    assert str(path) in msg, msg
    assert f"field '{field}'" in msg, msg
    assert f"= {value_repr}:" in msg, msg
    assert expected in msg, msg


# --- shipped specs ----------------------------------------------------------------------------------------

def test_shipped_specs_are_found():
    assert set(known_models()) >= {"deepseek-v3", "deepseek-v4-flash", "gpt-oss-120b", "gpt-oss-20b",
                                   "qwen3-30b-a3b"}


@pytest.mark.parametrize("name", known_models())
def test_every_shipped_model_loads(name):
    s = load_model(name)
    assert isinstance(s, ModelSpec)
    assert s.name == name
    assert s.source == str(CONFIG_DIR / "models" / f"{name}.yaml")
    assert s.variant == name  # shipped specs are unsplit
    assert s.local_experts == s.num_experts and s.expert_begin == 0
    assert s.local_intermediate == s.intermediate_size
    # The same file loaded by path gives the same spec.
    assert load_model(CONFIG_DIR / "models" / f"{name}.yaml") == s


def test_shipped_values():
    d = load_model("deepseek-v4-flash")
    assert (d.num_experts, d.hidden_size, d.intermediate_size, d.top_k) == (256, 4096, 2048, 6)
    assert (d.router.kind, d.router.n_group, d.router.topk_group, d.router.score_bias) == \
        ("sqrtsoftplus_topk", 1, 1, True)
    assert (d.router.routed_scaling_factor, d.router.hash_layers) == (1.5, 3)
    assert d.activation.limit == 10.0
    g = load_model("gpt-oss-120b")
    assert g.activation.kind == "swiglu_oai" and g.activation.alpha == 1.702 and g.activation.limit == 7.0
    assert g.gemm1_bias and g.gemm2_bias
    q = load_model("qwen3-30b-a3b")
    assert q.activation.limit is None and not q.gemm1_bias


def test_specs_are_frozen():
    s = load_model("deepseek-v3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.hidden_size = 1024
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.router.top_k = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.activation.limit = 3.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.parallel.tp_size = 2
    assert s.hidden_size == 7168 and s.router.top_k == 8


def test_to_dict_drops_source():
    s = load_model("gpt-oss-20b").with_parallel(tp_size=2)
    d = s.to_dict()
    assert "source" not in d
    assert d["parallel"] == {"tp_size": 2, "ep_size": 1, "ep_rank": 0}
    assert d["router"]["top_k"] == 4 and d["bias"] == {"gemm1": True, "gemm2": True}


@pytest.mark.parametrize("name", known_models())
def test_to_dict_round_trips_through_model_from_dict(name):
    """One schema both ways: what a manifest stores is what a YAML file says."""
    for s in (load_model(name), load_model(name).with_parallel(ep_size=2, ep_rank=1)):
        again = model_from_dict(s.to_dict(), s.source)
        assert again == s and again.to_dict() == s.to_dict()


# --- bad model files -----------------------------------------------------------------------------------

def _set(d, dotted, value):
    keys = dotted.split(".")
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = value


def _del(d, dotted):
    keys = dotted.split(".")
    for k in keys[:-1]:
        d = d[k]
    del d[keys[-1]]


# (id, base, {dotted field: value} to set (None value + "del:" prefix deletes), field, value repr, expected)
BAD_MODELS = [
    ("missing-hidden", TINY, {"del:hidden_size": None}, "hidden_size", "None", "field is required"),
    ("missing-router", TINY, {"del:router": None}, "router", "None", "field is required"),
    ("missing-top-k", TINY, {"del:router.top_k": None}, "router.top_k", "None", "field is required"),
    ("missing-activation-kind", TINY, {"del:activation.kind": None}, "activation.kind", "None",
     "field is required"),
    ("hidden-is-string", TINY, {"hidden_size": "4096"}, "hidden_size", "'4096'", "an integer"),
    ("experts-is-bool", TINY, {"num_experts": True}, "num_experts", "True", "an integer"),
    ("top-k-is-float", TINY, {"router.top_k": 2.5}, "router.top_k", "2.5", "an integer"),
    ("top-k-zero", TINY, {"router.top_k": 0}, "router.top_k", "0", "an integer >= 1"),
    ("renormalize-is-string", TINY, {"router.renormalize": "yes"}, "router.renormalize", "'yes'",
     "true or false"),
    ("scaling-not-positive", TINY, {"router.routed_scaling_factor": 0}, "router.routed_scaling_factor", "0",
     "a number > 0"),
    ("limit-is-string", TINY, {"activation.limit": "7"}, "activation.limit", "'7'", "a number or null"),
    ("router-kind-unknown", TINY, {"router.kind": "softmax"}, "router.kind", "'softmax'",
     "one of 'sigmoid_group_topk', 'sqrtsoftplus_topk', 'softmax_topk', 'topk_softmax'"),
    ("router-not-mapping", TINY, {"router": [1, 2]}, "router", "[1, 2]", "a mapping"),
    ("name-empty", TINY, {"name": ""}, "name", "''", "a name of 1-64 lower-case letters"),
    ("name-escapes", TINY, {"name": "../../../escaped"}, "name", "'../../../escaped'", "a name of 1-64"),
    ("name-absolute", TINY, {"name": "/tmp/x"}, "name", "'/tmp/x'", "a name of 1-64"),
    ("name-dotdot", TINY, {"name": "a..b"}, "name", "'a..b'", "a name of 1-64"),
    ("name-newline", TINY, {"name": "tiny\n// injected"}, "name", "'tiny\\n// injected'", "a name of 1-64"),
    ("name-upper", TINY, {"name": "Tiny"}, "name", "'Tiny'", "a name of 1-64"),
    ("name-not-string", TINY, {"name": 7}, "name", "7", "a name of 1-64"),
    ("hidden-too-large", TINY, {"hidden_size": 1099511627776}, "hidden_size", "1099511627776",
     "an integer <= 32768"),
    ("intermediate-too-large", TINY, {"intermediate_size": 65536}, "intermediate_size", "65536",
     "an integer <= 32768"),
    ("hidden-too-small", TINY, {"hidden_size": 0}, "hidden_size", "0", "an integer >= 32"),
    ("tp-too-large", TINY, {"parallel.tp_size": 1 << 40}, "parallel.tp_size", str(1 << 40), "an integer <= 32768"),
    ("hash-layers-negative", TINY, {"router.hash_layers": -1}, "router.hash_layers", "-1", "an integer >= 0"),
    ("score-bias-with-softmax-topk", TINY, {"router.kind": "topk_softmax", "router.score_bias": True},
     "router.score_bias", "True", "a score bias needs kind sigmoid_group_topk or sqrtsoftplus_topk"),
    ("groups-with-sqrtsoftplus", dict(TINY, router={"kind": "sqrtsoftplus_topk", "top_k": 2}), {"router.n_group": 2},
     "router.n_group", "2", "grouping needs kind sigmoid_group_topk, not sqrtsoftplus_topk"),
    ("unknown-top-level-field", TINY, {"hiden_size": 256}, "hiden_size", "256", "no such field"),
    ("unknown-router-field", TINY, {"router.topk": 2}, "router.topk", "2", "no such field"),
    ("unknown-bias-field", TINY, {"bias.gemm3": True}, "bias.gemm3", "True", "no such field"),
    ("top-k-over-experts", TINY, {"router.top_k": 9}, "router.top_k", "9", "at most min(num_experts, 32) = 8"),
    ("top-k-over-32", dict(TINY, num_experts=64), {"router.top_k": 33}, "router.top_k", "33",
     "an integer <= 32"),
    ("too-many-experts", TINY, {"num_experts": 2048}, "num_experts", "2048", "an integer <= 1024"),
    ("n-group-not-dividing", GROUPED, {"router.n_group": 3}, "router.n_group", "3",
     "a divisor of num_experts (16)"),
    ("topk-group-over-n-group", GROUPED, {"router.topk_group": 5}, "router.topk_group", "5",
     "between 1 and n_group (4)"),
    ("groups-cannot-hold-top-k", GROUPED, {"router.topk_group": 1, "router.top_k": 5}, "router.topk_group", "1",
     "enough groups to hold top_k=5"),
    ("top2-sum-with-singleton-groups", GROUPED, {"router.n_group": 16, "router.topk_group": 4,
                                                 "router.group_score": "top2_sum"},
     "router.group_score", "'top2_sum'", "'max' when groups have one expert"),
    ("hidden-not-multiple-of-32", TINY, {"hidden_size": 100}, "hidden_size", "100", "a multiple of 32"),
    ("intermediate-not-multiple-of-32", TINY, {"intermediate_size": 144}, "intermediate_size", "144",
     "a multiple of 32"),
    # 128 = four 32-groups: three ranks take two each, and the third would hold none
    ("tp-leaves-a-rank-nothing", TINY, {"parallel.tp_size": 3}, "parallel.tp_size", "3",
     "a split leaving every rank some of the 4 groups of 32 intermediate columns (at 64 columns per rank the "
     "last rank would hold none)"),
    ("ep-not-dividing", TINY, {"parallel.ep_size": 3}, "parallel.ep_size", "3", "a divisor of num_experts (8)"),
    ("ep-rank-too-large", TINY, {"parallel.ep_size": 2, "parallel.ep_rank": 2}, "parallel.ep_rank", "2",
     "less than ep_size (2)"),
    ("ep-rank-negative", TINY, {"parallel.ep_rank": -1}, "parallel.ep_rank", "-1", "an integer >= 0"),
    ("score-bias-with-softmax", TINY, {"router.score_bias": True}, "router.score_bias", "True",
     "score bias needs kind sigmoid_group_topk"),
    ("groups-with-softmax", TINY, {"router.n_group": 2}, "router.n_group", "2",
     "grouping needs kind sigmoid_group_topk"),
    ("alpha-with-plain-swiglu", TINY, {"activation.alpha": 1.702}, "activation.alpha", "1.702",
     "1.0 (alpha only applies to swiglu_oai)"),
]


@pytest.mark.parametrize("base, changes, field, value_repr, expected",
                         [b[1:] for b in BAD_MODELS], ids=[b[0] for b in BAD_MODELS])
def test_bad_model_file(tmp_path, base, changes, field, value_repr, expected):
    data = copy.deepcopy(base)
    for key, value in changes.items():
        if key.startswith("del:"):
            _del(data, key[4:])
        else:
            _set(data, key, value)
    path = write(tmp_path, data)
    with pytest.raises(SpecError) as excinfo:
        load_model(path)
    assert_spec_error(excinfo, path, field, value_repr, expected)


@pytest.mark.parametrize("base", [TINY, GROUPED, dict(TINY, hidden_size=2880, intermediate_size=2880,
                                                      parallel={"tp_size": 2})])
def test_bases_of_bad_files_are_valid(tmp_path, base):
    # Each bad file above is one change away from a valid one: the error comes from that change.
    s = load_model(write(tmp_path, base))
    assert s.name == base["name"]


def test_unknown_field_lists_known_fields(tmp_path):
    path = write(tmp_path, dict(TINY, extra=1))
    with pytest.raises(SpecError, match=r"known: .*hidden_size.*num_experts"):
        load_model(path)


def test_invalid_yaml_syntax(tmp_path):
    path = write(tmp_path, "name: tiny\nrouter: {kind: softmax_topk, top_k: 2\nactivation: [\n")
    with pytest.raises(SpecError) as excinfo:
        load_model(path)
    msg = str(excinfo.value)
    assert msg.startswith(f"{path}: not valid YAML")


@pytest.mark.parametrize("text, value_repr", [("- a\n- b\n", "['a', 'b']"), ("42\n", "42"), ("", "None")])
def test_non_mapping_top_level(tmp_path, text, value_repr):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as excinfo:
        load_model(path)
    assert_spec_error(excinfo, path, "<top level>", value_repr, "a mapping")


def test_unreadable_file(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(SpecError, match="cannot read"):
        load_model(path)


def test_unknown_name_lists_known_ones():
    with pytest.raises(SpecError) as excinfo:
        load_model("nope")
    msg = str(excinfo.value)
    assert "'nope'" in msg
    for known_name in known_models():
        assert known_name in msg


def test_spec_files_are_found_by_any_path_or_suffix(tmp_path, monkeypatch):
    text = (CONFIG_DIR / "models" / "gpt-oss-20b.yaml").read_text()
    monkeypatch.chdir(tmp_path)
    for name in ("S.YAML", "spec.txt", "gpt-oss-20b"):  # a file here beats nothing; a shipped name stays the model
        (tmp_path / name).write_text(text.replace("name: gpt-oss-20b", "name: mine"))
    assert load_model("./S.YAML").name == load_model("S.YAML").name == load_model("spec.txt").name == "mine"
    assert load_model("gpt-oss-20b").name == "gpt-oss-20b"


def test_duplicate_keys_are_an_error(tmp_path):
    path = write(tmp_path, "name: tiny\nnum_experts: 8\nnum_experts: 16\nhidden_size: 256\n")
    with pytest.raises(SpecError) as excinfo:
        load_model(path)
    msg = str(excinfo.value)
    assert msg.startswith(f"{path}: not valid YAML") and "'num_experts' given twice" in msg and "\n" not in msg


@pytest.mark.parametrize("text, why", [
    ("? [a, b]\n: 1\nname: tiny\n", "a key is a list, expected a name"),
    ("name: " + "[" * 50000 + "]" * 50000 + "\n", "nested too deeply|not valid YAML"),
])
def test_odd_yaml_is_a_one_line_error(tmp_path, text, why):
    path = write(tmp_path, text)
    with pytest.raises(SpecError, match=why) as excinfo:
        load_model(path)
    assert str(excinfo.value).startswith(str(path)) and "\n" not in str(excinfo.value)


def test_a_long_bad_value_is_quoted_short(tmp_path):
    shipped = (CONFIG_DIR / "models" / "qwen3-30b-a3b.yaml").read_text()
    path = write(tmp_path, shipped.replace("name: qwen3-30b-a3b", "name: " + "x" * 100000))
    with pytest.raises(SpecError, match="expected") as excinfo:
        load_model(path)
    assert len(str(excinfo.value)) < 400 and "(100002 chars)" in str(excinfo.value)


def test_non_utf8_file_names_the_file(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: tiny\n# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(SpecError, match=f"^{path}: not UTF-8 text"):
        load_model(path)


def test_yml_paths_and_relative_paths_load(tmp_path, monkeypatch):
    path = write(tmp_path, TINY, name="tiny.yml")
    assert load_model(path).name == "tiny"
    assert load_model(str(path)).name == "tiny"
    monkeypatch.chdir(tmp_path)
    assert load_model("tiny.yml").name == "tiny"
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", TINY, name="spec")  # no suffix, but a path
    assert load_model("sub/spec").name == "tiny"
    with pytest.raises(SpecError, match="missing.yml: cannot read"):
        load_model(tmp_path / "missing.yml")


def test_directory_instead_of_file(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(SpecError, match="dir.yaml: is a directory"):
        load_model(tmp_path / "dir.yaml")


def test_name_must_match_file_name_in_config_dir(tmp_path):
    (tmp_path / "models").mkdir()
    path = write(tmp_path / "models", dict(TINY, name="other"), name="tiny.yaml")
    assert known_models(tmp_path) == ["tiny"]
    with pytest.raises(SpecError) as excinfo:
        load_model("tiny", config_dir=tmp_path)
    assert_spec_error(excinfo, path, "name", "'other'", "'tiny' (the file's name)")
    # Outside a config dir any name goes.
    assert load_model(path).name == "other"


def test_model_from_dict_defaults():
    s = model_from_dict(TINY)
    assert s.source == "<inline>"
    assert s.router.renormalize is True and s.router.n_group == 1 and s.router.routed_scaling_factor == 1.0
    assert s.activation.limit is None and s.activation.alpha == 1.0
    assert not s.gemm1_bias and not s.gemm2_bias
    assert s.parallel.tp_size == 1 and s.parallel.ep_size == 1 and s.parallel.ep_rank == 0


def test_model_from_dict_does_not_mutate_input():
    data = copy.deepcopy(GROUPED)
    model_from_dict(data)
    assert data == GROUPED


# --- parallel splits -------------------------------------------------------------------------------------

def test_with_parallel_tp():
    base = load_model("gpt-oss-20b")
    s = base.with_parallel(tp_size=2)
    assert s.variant == "gpt-oss-20b-tp2"
    assert s.local_intermediate == 1440 and s.intermediate_size == 2880
    assert s.local_experts == 32 and s.expert_begin == 0
    assert s.parallel.tp_size == 2 and s.parallel.ep_size == 1
    # The original is untouched; everything but parallel carries over.
    assert base.parallel.tp_size == 1 and base.variant == "gpt-oss-20b"
    assert dataclasses.replace(s, parallel=base.parallel) == base


def test_with_parallel_ep():
    s = load_model("qwen3-30b-a3b").with_parallel(ep_size=4, ep_rank=1)
    assert s.variant == "qwen3-30b-a3b-ep1of4"
    assert s.local_experts == 32 and s.expert_begin == 32
    assert s.local_intermediate == 768
    last = s.with_parallel(ep_rank=3)  # keeps ep_size=4
    assert last.variant == "qwen3-30b-a3b-ep3of4" and last.expert_begin == 96


def test_with_parallel_tp_and_ep():
    s = load_model("deepseek-v3").with_parallel(tp_size=4, ep_size=8, ep_rank=7)
    assert s.variant == "deepseek-v3-tp4-ep7of8"
    assert s.local_intermediate == 512 and s.local_experts == 32 and s.expert_begin == 224
    assert s.with_parallel(tp_size=1, ep_size=1, ep_rank=0).variant == "deepseek-v3"


@pytest.mark.parametrize("model, kwargs, field, value_repr, expected", [
    ("gpt-oss-20b", dict(tp_size=46), "parallel.tp_size", "46", "(at 64 columns per rank the last rank would hold none)"),
    ("deepseek-v4-flash", dict(tp_size=48), "parallel.tp_size", "48", "some of the 64 groups of 32 intermediate columns"),
    ("qwen3-30b-a3b", dict(ep_size=3), "parallel.ep_size", "3", "a divisor of num_experts (128)"),
    ("qwen3-30b-a3b", dict(ep_size=4, ep_rank=4), "parallel.ep_rank", "4", "less than ep_size (4)"),
    ("qwen3-30b-a3b", dict(ep_rank=1), "parallel.ep_rank", "1", "less than ep_size (1)"),
])
def test_with_parallel_validates_overrides(model, kwargs, field, value_repr, expected):
    base = load_model(model)
    with pytest.raises(SpecError) as excinfo:
        base.with_parallel(**kwargs)
    assert_spec_error(excinfo, base.source, field, value_repr, expected)
    assert "(parallel split)" in str(excinfo.value)


def test_tp_splits_take_whole_scale_groups_and_pad_the_last_ranks():
    """gpt-oss's 2880 = 90 groups of 32: TP 4 and 8 (as engines deploy it) pad the last rank's columns."""
    s = load_model("gpt-oss-120b")
    for tp, local, last in ((1, 2880, (0, 2880)), (2, 1440, (1440, 2880)), (4, 736, (2208, 2880)),
                            (8, 384, (2688, 2880)), (3, 960, (1920, 2880))):
        split = s.with_parallel(tp_size=tp)
        assert split.local_intermediate == local and split.tp_slice(tp - 1) == last
        assert [split.tp_slice(r)[1] - split.tp_slice(r)[0] for r in range(tp - 1)] == [local] * (tp - 1)
    assert [t for t in range(40, 50) if _ok(lambda: s.with_parallel(tp_size=t))] == [45]  # 90 = 45 x 2 groups
    assert load_model("deepseek-v4-flash").with_parallel(tp_size=8).local_intermediate == 256  # exact splits stay exact
    with pytest.raises(ValueError, match="tp_rank: 4, expected 0..3"):
        s.with_parallel(tp_size=4).tp_slice(4)


def _ok(fn):
    try:
        fn()
        return True
    except SpecError:
        return False


# Bugs in moegen/spec.py (reported): with_parallel skips the >= 1 / >= 0 / integer checks model_from_dict does.
def test_with_parallel_rejects_zero_tp():
    with pytest.raises(SpecError, match="parallel.tp_size"):
        load_model("gpt-oss-20b").with_parallel(tp_size=0)


def test_with_parallel_rejects_negative_ep_rank():
    with pytest.raises(SpecError, match="parallel.ep_rank"):
        load_model("qwen3-30b-a3b").with_parallel(ep_rank=-1)


def test_activations_field_defaults_and_names_the_variant(tmp_path):
    spec = load_model("deepseek-v4-flash")
    assert spec.activations == "bf16" and spec.to_dict()["activations"] == "bf16"
    w4a8 = spec.with_activations("fp8")
    assert w4a8.variant == "deepseek-v4-flash-w4a8" and model_from_dict(w4a8.to_dict()) == dataclasses.replace(w4a8, source="<inline>")
    with pytest.raises(SpecError, match=r"field 'activations' = 'int4': expected one of 'bf16', 'fp8'"):
        spec.with_activations("int4")
    data = spec.to_dict()
    data["activations"] = "e4m3"
    with pytest.raises(SpecError, match=r"'activations' = 'e4m3'"):
        model_from_dict(data, "x.yaml")


def test_a_spec_built_in_code_is_validated_like_a_file():
    good = load_model("qwen3-30b-a3b")
    with pytest.raises(SpecError, match="field 'num_experts' = 'x': expected an integer"):
        dataclasses.replace(good, num_experts="x")
    with pytest.raises(SpecError, match="field 'router.top_k' = 200: expected an integer <= 32"):
        ModelSpec(good.name, good.num_experts, good.hidden_size, good.intermediate_size,
                  dataclasses.replace(good.router, top_k=200), good.activation)
    with pytest.raises(SpecError, match="field 'router' = .*: expected a moegen.spec.RouterSpec"):
        ModelSpec(good.name, good.num_experts, good.hidden_size, good.intermediate_size, {"kind": "x"},
                  good.activation)
    assert dataclasses.replace(good) == good


def test_yaml_merge_keys_merge_and_the_mappings_own_keys_override(tmp_path):
    path = write(tmp_path, "name: merged\nnum_experts: 128\nhidden_size: 2048\nintermediate_size: 768\n"
                           "router:\n  <<: {kind: softmax_topk, top_k: 4, renormalize: false}\n  top_k: 6\n"
                           "activation: {kind: swiglu}\n")
    merged = load_model(path)
    assert merged.router.kind == "softmax_topk" and merged.router.top_k == 6 and merged.router.renormalize is False


@pytest.mark.parametrize("text, why", [
    ("name: t\nhidden_size: 0x" + "f" * 5000 + "\n", "hidden_size|not a valid spec value|integer"),
    ("router:\n  <<: {kind: topk_softmax, top_k: 2, top_k: 3}\n", "'top_k' given twice"),
    ("router:\n  <<: {kind: topk_softmax}\n  <<: {top_k: 4}\n", "'<<' given twice"),
])
def test_huge_integers_and_merged_duplicates_are_one_line_errors(tmp_path, text, why):
    path = write(tmp_path, text)
    with pytest.raises(SpecError, match=why) as excinfo:
        load_model(path)
    assert str(excinfo.value).startswith(str(path)) and len(str(excinfo.value)) < 400


def test_a_fifo_is_refused_not_read(tmp_path):
    import os
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="not a regular file"):
        load_model(fifo)  # returns at once: never blocks on the FIFO


def test_a_chained_merge_is_refused_not_resolved_wrongly(tmp_path):
    # PyYAML flattens the middle mapping in place, then merges it with its merged key first: x would be 1
    path = write(tmp_path, "x-b: &b {kind: softmax_topk, top_k: 2}\nx-a: &a {<<: *b, top_k: 6}\n"
                           "name: t\nrouter: {<<: *a}\n")
    with pytest.raises(SpecError, match="a merged mapping merges another"):
        load_model(path)


@pytest.mark.parametrize("field, text, value_repr, expected", [
    ("hidden_size", "48:00", "'48:00'", "an integer"),  # YAML 1.1: sexagesimal 2880
    ("hidden_size", "0x100", "'0x100'", "an integer"),
    ("hidden_size", "2_56", "'2_56'", "an integer"),
    ("router.renormalize", "yes", "'yes'", "true or false"),
])
def test_yaml_1_1_spellings_are_strings_not_numbers(tmp_path, field, text, value_repr, expected):
    """Plain scalars read by YAML 1.2's core schema: a typo YAML 1.1 would turn into another number is
    refused with the text as written."""
    base = yaml.safe_dump(dict(TINY, router=dict(TINY["router"], renormalize=True)))
    leaf = field.split(".")[-1]
    assert f"{leaf}: " in base, base
    path = write(tmp_path, "\n".join(f"{line.split(':')[0]}: {text}" if line.strip().startswith(f"{leaf}:") else line
                                     for line in base.splitlines()))
    with pytest.raises(SpecError) as excinfo:
        load_model(path)
    assert_spec_error(excinfo, path, field, value_repr, expected)


def test_decimal_integers_with_leading_zeros_are_decimal(tmp_path):
    text = yaml.safe_dump(TINY).replace("num_experts: 8", "num_experts: 008")
    assert "num_experts: 008" in text
    assert load_model(write(tmp_path, text)).num_experts == 8


@pytest.mark.parametrize("field", ["num_experts", "unknown_field"])
def test_an_alias_bomb_is_quoted_without_expanding_it(tmp_path, field):
    # nine levels of nine aliases: a 1-KB file whose value is 9**10 strings once expanded
    levels = '["x","x","x","x","x","x","x","x","x"]'
    for i in range(9):
        levels = f"[&l{i} {levels}" + f",*l{i}" * 8 + "]"
    shipped = (CONFIG_DIR / "models" / "qwen3-30b-a3b.yaml").read_text()
    path = write(tmp_path, shipped + f"{field}: {levels}\n" if field == "unknown_field"
                 else shipped.replace("num_experts: 128", f"num_experts: {levels}"))
    started = time.monotonic()
    with pytest.raises(SpecError, match=field) as excinfo:
        load_model(path)
    # a repr of the whole value takes 35-40 s and 2 GB before it is cut
    assert time.monotonic() - started < 10
    assert len(str(excinfo.value)) < 400 and "\n" not in str(excinfo.value)


def test_an_integer_past_python_s_digit_limit_is_refused_by_its_field(tmp_path):
    shipped = (CONFIG_DIR / "models" / "qwen3-30b-a3b.yaml").read_text()
    path = write(tmp_path, shipped.replace("num_experts: 128", "num_experts: " + "1" * 5000))
    with pytest.raises(SpecError, match=r"field 'num_experts' = <an integer of \d+ bits>: expected an integer"):
        load_model(path)
