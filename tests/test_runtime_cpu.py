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
    with pytest.raises(ValueError, match="handle 4242: not a loaded moegen library"):
        torch.ops.moegen.moe_experts_batched(4242, t, t, 1, t, t, t, None, t, t, t, None, 0, 0)
    with pytest.raises(ValueError, match="handle 4242: not a loaded moegen library"):
        torch.ops.moegen.moe_experts_batched_into(4242, t, t, 1, t, t, t, None, t, t, t, None, 0, 0, t)


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
                 "moegen_experts_args": "MOEGEN_EXPERTS_ARGS_FIELDS",
                 "moegen_batched_args": "MOEGEN_BATCHED_ARGS_FIELDS"}[name]
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


@pytest.mark.parametrize("layout, alignment", [("sm90_e2m1_atom64", 16), ("sm100_e2m1_sf128x4", 32)])
def test_weights_are_checked_at_their_layouts_alignment(layout, alignment):
    """SM100's FP4 tensor maps take 32-byte-aligned addresses; SM90's bulk copies 16."""
    from moegen.layout import get_layout
    from moegen.runtime import _check_weights, _LayerShape
    s = _LayerShape(num_experts=2, local_experts=2, top_k=1, hidden=128, intermediate=128, score_bias=False,
                    bias13=False, bias2=False, layout=layout)
    lay, cpu = get_layout(layout), torch.device("cpu")

    def gemm(n, k, offset=0):
        shapes = lay.shapes(2, n, k)
        size = torch.Size(shapes["w"]).numel()
        w = torch.zeros(size + 64, dtype=torch.uint8)[offset:offset + size].view(shapes["w"])
        return (w, torch.zeros(shapes["scales"], dtype=torch.uint8), torch.ones(2), None)

    base = torch.zeros(1, dtype=torch.uint8).data_ptr() % 64  # allocations are aligned further; offsets count
    assert base == 0
    _check_weights(s, cpu, *gemm(256, 128), *gemm(128, 128))
    _check_weights(s, cpu, *gemm(256, 128, alignment), *gemm(128, 128))
    with pytest.raises(ValueError, match=f"weights.gemm1.w: data pointer .*, expected {alignment}-byte alignment"):
        _check_weights(s, cpu, *gemm(256, 128, alignment // 2), *gemm(128, 128))
