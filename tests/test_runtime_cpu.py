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
                    bias13=False, bias2=False, layout=layout, device=0)
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


def test_hash_route_masks_ids_outside_the_vocabulary_and_the_experts():
    """DeepSeek-V4's hash layers: valid ids give the table's experts and the renormalized scores; a token
    id outside the table, or a table entry outside the experts, gives -1 slots (no expert) with weight 0,
    on the device, without a host sync or an out-of-bounds gather."""
    from moegen.routing import hash_route
    spec = moegen.load_model("deepseek-v4-flash")
    E, K = spec.num_experts, spec.top_k
    g = torch.Generator().manual_seed(0)
    tid2eid = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(50)]).int()
    tid2eid[7, 2] = E  # a corrupt entry
    logits = torch.randn(4, E, generator=g)
    input_ids = torch.tensor([3, 7, -1, 50])
    ids, w = hash_route(spec, logits, tid2eid, input_ids)
    scores = torch.sqrt(torch.nn.functional.softplus(logits.double()))
    want = scores[0, tid2eid[3].long()]
    assert torch.equal(ids[0], tid2eid[3]) and torch.allclose(w[0].double(), want / want.sum() * spec.router.routed_scaling_factor)
    assert ids[1, 2] == -1 and w[1, 2] == 0 and torch.equal(ids[1, [0, 1, 3, 4, 5]], tid2eid[7, [0, 1, 3, 4, 5]])
    assert torch.allclose(w[1].sum().double(), torch.tensor(spec.router.routed_scaling_factor, dtype=torch.float64))
    assert (ids[2:] == -1).all() and (w[2:] == 0).all() and torch.isfinite(w).all()
    with pytest.raises(ValueError, match=r"tid2eid: torch.float32 \(50, 6\), expected a \[vocab, 6\] integer tensor"):
        hash_route(spec, logits, tid2eid.float(), input_ids)


def _meta_layer(model: str, handle: int):
    """A MoeLayer with no library behind it (handle registered with the ops' fakes only) and meta
    weights: torch.compile traces it through the fake implementations."""
    from types import SimpleNamespace

    from moegen import runtime
    from moegen.arch import get_arch
    from moegen.layout import PreparedGemm, PreparedWeights

    spec = moegen.load_model(model)
    layer = object.__new__(runtime.MoeLayer)
    layer.library, layer.spec, layer.dispatch = SimpleNamespace(handle=handle), spec, None
    layer.kernels, layer.weight_layout = get_arch("sm90").fallback_configs(spec), "sm90_e2m1_atom64"
    runtime._SHAPES[handle] = runtime._LayerShape(spec.num_experts, spec.local_experts, spec.top_k, spec.hidden_size,
                                                  spec.local_intermediate, False, False, False, layer.weight_layout, 0)
    meta = torch.device("meta")
    gemm = PreparedGemm(torch.empty(1, device=meta), torch.empty(1, device=meta), torch.empty(1, device=meta), None)
    return layer, PreparedWeights(layer.weight_layout, gemm, gemm)


def test_compiled_calls_choose_their_kernels_in_the_op_not_in_the_trace():
    """torch.compile(fullgraph=True) traces every entry point at any T, and the traced op is called with
    kernels (-1, -1): the layer's dispatch picks them per call, inside the op, from the call's own T (a
    trace at one T serving every T of a dynamic batch dimension would otherwise run the trace's kernels)."""
    from moegen import runtime

    handle = 10 ** 6  # no library behind it: the backend below never runs the op
    layer, weights = _meta_layer("qwen3-30b-a3b", handle)
    spec, meta = layer.spec, torch.device("meta")
    graphs = []

    def backend(gm, example_inputs):  # runs the graph on meta tensors: the ops' fake implementations
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    for T in (8, 2049, 8192):  # beyond the fallback kernels' largest block_n: the heuristic's other branch
        h = torch.empty(T, spec.hidden_size, dtype=torch.bfloat16, device=meta)
        ids = torch.empty(T, spec.top_k, dtype=torch.int32, device=meta)
        w = torch.empty(T, spec.top_k, dtype=torch.float32, device=meta)
        torch.compile(lambda h, ids, w: layer.experts(h, ids, w, weights), fullgraph=True, backend=backend)(h, ids, w)
        grouped = torch.empty(spec.local_experts, T, spec.hidden_size, dtype=torch.bfloat16, device=meta)
        counts = torch.empty(spec.local_experts, dtype=torch.int32, device=meta)
        torch.compile(lambda x, c: layer.experts_batched(x, c, weights, num_tokens=T), fullgraph=True,
                      backend=backend)(grouped, counts)
    calls = [n for g in graphs for n in g.graph.nodes if n.op == "call_function" and "moegen" in str(n.target)]
    assert len(calls) >= 4 and {str(n.target).split(".")[1] for n in calls} == {"moe_experts", "moe_experts_batched"}
    assert all(tuple(n.args[-3:-1]) == (-1, -1) for n in calls)  # (..., gemm1_kernel, gemm2_kernel, poison)
    assert runtime._kernels(handle, 3, 4, 1) == (3, 4)
    runtime._CHOOSE[handle] = layer.choose_kernels
    assert runtime._kernels(handle, -1, -1, 9000) == layer.choose_kernels(9000)


def test_one_compiled_function_serves_several_layers():
    """A function compiled once and called with two layers: on the second, Dynamo makes the handle a
    dynamic int, and the ops' fake implementations must still find the layer's shapes (fullgraph, so a
    graph break fails here rather than falling back to eager)."""
    meta = torch.device("meta")
    layers = [_meta_layer(model, 10 ** 6 + i) for i, model in enumerate(("qwen3-30b-a3b", "gpt-oss-20b"))]

    def backend(gm, example_inputs):
        return gm.forward

    torch._dynamo.reset()
    experts = torch.compile(lambda layer, w, h, ids, tw: layer.experts(h, ids, tw, w), fullgraph=True, backend=backend)
    batched = torch.compile(lambda layer, w, x, c: layer.experts_batched(x, c, w, num_tokens=5), fullgraph=True,
                            backend=backend)
    forward = torch.compile(lambda layer, w, h, logits: layer(h, logits, w).out, fullgraph=True, backend=backend)
    for layer, w in layers + layers:
        spec = layer.spec
        logits = torch.empty(7, spec.num_experts, dtype=torch.float32, device=meta)
        assert forward(layer, w, torch.empty(7, spec.hidden_size, dtype=torch.bfloat16, device=meta),
                       logits).shape == (7, spec.hidden_size)
        h = torch.empty(7, spec.hidden_size, dtype=torch.bfloat16, device=meta)
        ids = torch.empty(7, spec.top_k, dtype=torch.int32, device=meta)
        tw = torch.empty(7, spec.top_k, dtype=torch.float32, device=meta)
        assert experts(layer, w, h, ids, tw).shape == (7, spec.hidden_size)
        x = torch.empty(spec.local_experts, 3, spec.hidden_size, dtype=torch.bfloat16, device=meta)
        c = torch.empty(spec.local_experts, dtype=torch.int32, device=meta)
        assert batched(layer, w, x, c).shape == x.shape
