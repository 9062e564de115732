"""Runtime checks that need no GPU: the public custom ops refuse a bad handle before touching any
tensor, prepare refuses a non-spec, and the ctypes mirror matches abi.h field by field."""
import re

import pytest
import torch

import moegen
from moegen import binding, runtime  # noqa: F401  (registers torch.ops.moegen.*)
from moegen.render import INCLUDE_DIR


def test_custom_ops_refuse_an_unknown_handle():
    t = torch.zeros(1, 8)
    with pytest.raises(ValueError, match="handle 4242: not a loaded moegen library"):
        torch.ops.moegen.moe_forward(4242, t, t, None, t, t, t, None, t, t, t, None, 0, 0)
    with pytest.raises(ValueError, match="handle 4242: not a loaded moegen library"):
        torch.ops.moegen.moe_experts(4242, t, t, t, None, t, t, t, None, t, t, t, None, 0, 0)


def test_prepare_refuses_a_non_spec():
    from moegen.prepare import prepare
    with pytest.raises(ValueError, match="spec: NoneType, expected a moegen ModelSpec"):
        prepare(None, None, None, None, None)
    spec = moegen.load_model("qwen3-30b-a3b")
    with pytest.raises(ValueError, match="w13: NoneType, expected a torch.uint8 tensor"):
        prepare(spec, None, None, None, None)
    with pytest.raises(ValueError, match="layout 'sm100_x': expected one of sm90_e2m1_atom64"):
        prepare(spec, None, None, None, None, layout="sm100_x")


def test_abi_header_fields_match_the_binding():
    """abi.h's struct fields, in order, are the ctypes mirror's (the library reports its offsets too)."""
    text = (INCLUDE_DIR / "moegen" / "abi.h").read_text()
    for name, struct in binding.STRUCTS.items():
        body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), text, re.S).group(1)
        fields = re.findall(r"(\w+);", re.sub(r"//.*", "", body))
        assert fields == [f for f, _ in struct._fields_], name
        macro = {"moegen_weights": "MOEGEN_WEIGHTS_FIELDS", "moegen_args": "MOEGEN_ARGS_FIELDS",
                 "moegen_experts_args": "MOEGEN_EXPERTS_ARGS_FIELDS"}[name]
        listed = re.search(r"#define %s\(X\)(.*?)(?:\n#|\Z)" % macro, text, re.S).group(1)
        assert re.findall(r"X\((\w+)\)", listed) == fields, macro


def test_lazy_submodules():
    assert moegen.checkpoint.load_experts and moegen.routing.hash_route and moegen.prepare.prepare
    assert moegen.load_experts.__doc__
    with pytest.raises(AttributeError):
        moegen.nope


@pytest.mark.parametrize("name, value, other, warning", [
    ("MOEGEN_GRID", "tiles", "MOEGEN_GEMM2_WAIT", "MOEGEN_GRID=tiles is set: the library's kernels take it"),
    ("MOEGEN_GEMM2_WAIT", "garbage", "MOEGEN_GRID", "MOEGEN_GEMM2_WAIT='garbage' is set and ignored: expected expert or grid"),
])
def test_a_benchmarking_switch_in_the_environment_is_warned_about(tmp_path, monkeypatch, name, value, other, warning):
    from moegen import dispatch, runtime

    monkeypatch.setenv(name, value)
    monkeypatch.delenv(other, raising=False)
    dispatch._warned.clear()
    with pytest.warns(RuntimeWarning, match=warning):
        with pytest.raises(runtime.LoadError):
            runtime.load(tmp_path)
    assert runtime.benchmark_switches() == {name: value}
