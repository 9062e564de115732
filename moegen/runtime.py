"""Runtime: load a built directory, check it against the GPU and the spec, run the layer.

The ground floor: it imports the spec, the artifact (manifest, ABI, hashing), dispatch, the weight
layouts and the C binding, never the build, render or tune modules.

Five PyTorch custom ops in three entry points, each checking every argument it is given (they are public:
``torch.ops.moegen.*``), with no host synchronization and every buffer from PyTorch's allocator, so
they capture in CUDA graphs and trace under ``torch.compile(fullgraph=True)``:

* ``moegen::moe_forward``: the fused layer, routing from the router's logits;
* ``moegen::moe_experts`` / ``moegen::moe_experts_into``: the experts on the caller's routing (global
  top-k ids and weights, an optional global-to-local expert map), for serving engines;
* ``moegen::moe_experts_batched`` / ``moegen::moe_experts_batched_into``: the experts on rows already
  grouped by local expert ([E_local, M, hidden] and a count per expert: the layout a low-latency
  expert-parallel dispatch such as DeepEP's delivers), unweighted.
"""
from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from .artifact import ArtifactError, built_spec, generator_digest, read_manifest, verify_library
from .binding import (IDS_I32, IDS_I64, LOGITS_BF16, LOGITS_F32, Args, BatchedArgs, ExpertsArgs, Library, Weights,
                      library)
from .dispatch import GpuInfo, find_dispatch, heuristic_choice, user_dir, warn_once
from .layout import PreparedWeights, get_layout
from .naming import KernelConfig, parse_kernel_name
from .problem import ProblemKey
from .spec import ModelSpec, shown


class LoadError(RuntimeError):
    """The built directory cannot serve this GPU or spec; the message says why."""


@dataclass(frozen=True)
class _LayerShape:
    """What the custom ops check a call against (from the library's embedded spec)."""
    num_experts: int
    local_experts: int
    top_k: int
    hidden: int
    intermediate: int
    score_bias: bool
    bias13: bool
    bias2: bool
    layout: str
    device: int  # the CUDA device index `load` checked this GPU and table for


# How each loaded layer picks its kernels for T tokens (MoeLayer.choose_kernels), for ops called
# with kernels (-1, -1): the choice is made inside the op, where T is a number, so a call that
# torch.compile traced or a CUDA graph captured dispatches on its own T, not on the trace's.
_CHOOSE: dict[int, Callable[[int], tuple[int, int]]] = {}


_SHAPES: dict[int, _LayerShape] = {}


def _kernels(handle: int, gemm1_kernel: int, gemm2_kernel: int, tokens: int) -> tuple[int, int]:
    if (gemm1_kernel, gemm2_kernel) == (-1, -1):
        return _CHOOSE[handle](tokens)
    return gemm1_kernel, gemm2_kernel


def _fail(what: str, got, expected: str):
    raise ValueError(f"{what}: {got}, expected {expected}")


def _check_tensor(name: str, t, shape: tuple, dtypes: tuple, device: torch.device | None, alignment: int = 16) -> None:
    if not isinstance(t, torch.Tensor):
        _fail(name, type(t).__name__, "a torch.Tensor")
    if t.dtype not in dtypes:
        _fail(name, f"dtype {t.dtype}", " or ".join(map(str, dtypes)))
    if tuple(t.shape) != tuple(shape):
        _fail(name, f"shape {tuple(t.shape)}", str(tuple(shape)))
    if device is not None and t.device != device:
        _fail(name, f"on {t.device}", f"{device} (the device of hidden_states)")
    if not t.is_contiguous():
        _fail(name, "not contiguous", "a contiguous tensor (call .contiguous())")
    if t.numel() and t.data_ptr() % alignment:
        _fail(name, f"data pointer {t.data_ptr():#x}", f"{alignment}-byte alignment (the kernels' loads need it)")


def _element_aligned(t) -> int:
    """The routing reads these tensors an element at a time: a row slice of a larger one is fine."""
    return t.element_size() if isinstance(t, torch.Tensor) else 1


def _check_hidden(s: _LayerShape, hidden) -> torch.device:
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2:
        got = f"shape {tuple(hidden.shape)}" if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        _fail("hidden_states", got, f"a 2-D tensor [T, {s.hidden}]")
    _check_layer_device(s, hidden)
    _check_tensor("hidden_states", hidden, (hidden.shape[0], s.hidden), (torch.bfloat16,), hidden.device)
    return hidden.device


def _check_layer_device(s: _LayerShape, hidden: torch.Tensor) -> None:
    if hidden.device.type != "cuda" or hidden.device.index != s.device:
        _fail("hidden_states", f"on {hidden.device}", f"cuda:{s.device}, the GPU this layer was loaded for "
              "(moegen.load(..., device=...) loads it for another)")


def _check_weights(s: _LayerShape, dev: torch.device, w13, w13_scales, w13_expert_scale, b13, w2, w2_scales,
                   w2_expert_scale, b2) -> None:
    layout = get_layout(s.layout)
    for gname, (w, scales, escale, bias), n, k, has_bias in (
            ("gemm1", (w13, w13_scales, w13_expert_scale, b13), 2 * s.intermediate, s.hidden, s.bias13),
            ("gemm2", (w2, w2_scales, w2_expert_scale, b2), s.hidden, s.intermediate, s.bias2)):
        shapes = layout.shapes(s.local_experts, n, k)
        _check_tensor(f"weights.{gname}.w", w, shapes["w"], (torch.uint8,), dev, layout.w_alignment)
        _check_tensor(f"weights.{gname}.scales", scales, shapes["scales"], (torch.uint8,), dev)
        _check_tensor(f"weights.{gname}.expert_scale", escale, shapes["expert_scale"], (torch.float32,), dev)
        if has_bias:
            if bias is None:
                _fail(f"weights.{gname}.bias", "None", f"float32 [{s.local_experts}, {n}] (the model has this bias)")
            _check_tensor(f"weights.{gname}.bias", bias, (s.local_experts, n), (torch.float32,), dev)
        elif bias is not None:
            _fail(f"weights.{gname}.bias", "a tensor", "None (the model has no such bias)")


def _ptr(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


def _weights_struct(w13, w13_scales, w13_expert_scale, b13, w2, w2_scales, w2_expert_scale, b2) -> Weights:
    return Weights(w13=_ptr(w13), w13_scales=_ptr(w13_scales), w13_expert_scale=_ptr(w13_expert_scale), b13=_ptr(b13),
                   w2=_ptr(w2), w2_scales=_ptr(w2_scales), w2_expert_scale=_ptr(w2_expert_scale), b2=_ptr(b2))


def _layer(handle: int) -> tuple[Library, _LayerShape]:
    lib = library(handle)
    return lib, _SHAPES[handle]


def _check_tokens(lib: Library, T: int) -> None:
    if T > lib.max_tokens:
        _fail("hidden_states", f"{T} tokens", f"at most {lib.max_tokens} per call (32-bit row indices)")


def _workspace(lib: Library, T: int, dev, poison: bool) -> torch.Tensor:
    workspace = torch.empty(lib.workspace_bytes(T), dtype=torch.uint8, device=dev)
    if poison:
        workspace.fill_(0xFF)  # NaN as bf16/f32, -1 as int32
    return workspace


def _run(lib: Library, fn, args, k1: int, k2: int, dev) -> None:
    with torch.cuda.device(dev):  # the library launches on the current device; make it the tensors'
        stream = torch.cuda.current_stream(dev).cuda_stream
        rc = fn(ctypes.byref(args), k1, k2, ctypes.c_void_p(stream))
    if rc != 0:
        raise RuntimeError(f"moegen ({lib.path.name}): {lib.last_error()}")


@torch.library.custom_op("moegen::moe_forward", mutates_args=())
def moe_forward(handle: int, hidden: torch.Tensor, router_logits: torch.Tensor, score_bias: Optional[torch.Tensor],
                w13: torch.Tensor, w13_scales: torch.Tensor, w13_expert_scale: torch.Tensor,
                b13: Optional[torch.Tensor], w2: torch.Tensor, w2_scales: torch.Tensor,
                w2_expert_scale: torch.Tensor, b2: Optional[torch.Tensor], gemm1_kernel: int,
                gemm2_kernel: int, poison: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused layer: (out bf16 [T, H], topk_ids int32 [T, K], topk_weights f32 [T, K]).
    poison=True fills outputs and workspace with NaN/garbage first (tests: every element must be written)."""
    lib, s = _layer(handle)
    dev = _check_hidden(s, hidden)
    T = hidden.shape[0]
    _check_tokens(lib, T)
    _check_tensor("router_logits", router_logits, (T, s.num_experts), (torch.float32, torch.bfloat16), dev,
                  _element_aligned(router_logits))
    if s.score_bias:
        if score_bias is None:
            _fail("score_bias", "None", f"float32 [{s.num_experts}] (this router selects on score + bias)")
        _check_tensor("score_bias", score_bias, (s.num_experts,), (torch.float32,), dev, 4)
    elif score_bias is not None:
        _fail("score_bias", "a tensor", "None (this router takes no score bias)")
    weights = (w13, w13_scales, w13_expert_scale, b13, w2, w2_scales, w2_expert_scale, b2)
    _check_weights(s, dev, *weights)
    out = torch.empty((T, s.hidden), dtype=torch.bfloat16, device=dev)
    ids = torch.empty((T, s.top_k), dtype=torch.int32, device=dev)
    topk_weights = torch.empty((T, s.top_k), dtype=torch.float32, device=dev)
    if poison:
        out.fill_(float("nan"))
        ids.fill_(-7)
        topk_weights.fill_(float("nan"))
    workspace = _workspace(lib, T, dev, poison)
    args = Args(num_tokens=T, logits_dtype=LOGITS_F32 if router_logits.dtype == torch.float32 else LOGITS_BF16,
                hidden=_ptr(hidden), router_logits=_ptr(router_logits), score_bias=_ptr(score_bias),
                weights=_weights_struct(*weights), out=_ptr(out), topk_ids=_ptr(ids),
                topk_weights=_ptr(topk_weights), workspace=_ptr(workspace), workspace_bytes=workspace.numel())
    _run(lib, lib.dll.moegen_forward, args, *_kernels(handle, gemm1_kernel, gemm2_kernel, T), dev)
    return out, ids, topk_weights


@moe_forward.register_fake
def _(handle, hidden, router_logits, score_bias, w13, w13_scales, w13_expert_scale, b13, w2, w2_scales,
      w2_expert_scale, b2, gemm1_kernel, gemm2_kernel, poison=False):
    s = _SHAPES[int(handle)]  # int(): a handle Dynamo made dynamic (one function, several layers)
    T = hidden.shape[0]
    return (hidden.new_empty((T, s.hidden)), hidden.new_empty((T, s.top_k), dtype=torch.int32),
            hidden.new_empty((T, s.top_k), dtype=torch.float32))


def _experts(handle, hidden, topk_ids, topk_weights, expert_map, weights, gemm1_kernel, gemm2_kernel, out, poison):
    lib, s = _layer(handle)
    dev = _check_hidden(s, hidden)
    T = hidden.shape[0]
    _check_tokens(lib, T)
    _check_tensor("topk_ids", topk_ids, (T, s.top_k), (torch.int32, torch.int64), dev, _element_aligned(topk_ids))
    _check_tensor("topk_weights", topk_weights, (T, s.top_k), (torch.float32,), dev, 4)
    if expert_map is not None:
        _check_tensor("expert_map", expert_map, (s.num_experts,), (torch.int32,), dev, 4)
    _check_weights(s, dev, *weights)
    _check_tensor("out", out, (T, s.hidden), (torch.bfloat16,), dev)
    if poison:
        out.fill_(float("nan"))
    workspace = _workspace(lib, T, dev, poison)
    args = ExpertsArgs(num_tokens=T, ids_dtype=IDS_I32 if topk_ids.dtype == torch.int32 else IDS_I64,
                       hidden=_ptr(hidden), topk_ids=_ptr(topk_ids), topk_weights=_ptr(topk_weights),
                       expert_map=_ptr(expert_map), weights=_weights_struct(*weights), out=_ptr(out),
                       workspace=_ptr(workspace), workspace_bytes=workspace.numel())
    _run(lib, lib.dll.moegen_forward_experts, args, *_kernels(handle, gemm1_kernel, gemm2_kernel, T), dev)


@torch.library.custom_op("moegen::moe_experts", mutates_args=())
def moe_experts(handle: int, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                expert_map: Optional[torch.Tensor], w13: torch.Tensor, w13_scales: torch.Tensor,
                w13_expert_scale: torch.Tensor, b13: Optional[torch.Tensor], w2: torch.Tensor, w2_scales: torch.Tensor,
                w2_expert_scale: torch.Tensor, b2: Optional[torch.Tensor], gemm1_kernel: int, gemm2_kernel: int,
                poison: bool = False) -> torch.Tensor:
    """This rank's experts on the caller's routing: bf16 [T, H]."""
    s = _layer(handle)[1]
    out = torch.empty((hidden.shape[0], s.hidden), dtype=torch.bfloat16, device=hidden.device)
    _experts(handle, hidden, topk_ids, topk_weights, expert_map,
             (w13, w13_scales, w13_expert_scale, b13, w2, w2_scales, w2_expert_scale, b2), gemm1_kernel, gemm2_kernel,
             out, poison)
    return out


@moe_experts.register_fake
def _(handle, hidden, topk_ids, topk_weights, expert_map, w13, w13_scales, w13_expert_scale, b13, w2, w2_scales,
      w2_expert_scale, b2, gemm1_kernel, gemm2_kernel, poison=False):
    return hidden.new_empty((hidden.shape[0], _SHAPES[int(handle)].hidden))


@torch.library.custom_op("moegen::moe_experts_into", mutates_args=("out",))
def moe_experts_into(handle: int, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                     expert_map: Optional[torch.Tensor], w13: torch.Tensor, w13_scales: torch.Tensor,
                     w13_expert_scale: torch.Tensor, b13: Optional[torch.Tensor], w2: torch.Tensor,
                     w2_scales: torch.Tensor, w2_expert_scale: torch.Tensor, b2: Optional[torch.Tensor],
                     gemm1_kernel: int, gemm2_kernel: int, out: torch.Tensor, poison: bool = False) -> None:
    """As moe_experts, written into the caller's bf16 [T, H] buffer."""
    _experts(handle, hidden, topk_ids, topk_weights, expert_map,
             (w13, w13_scales, w13_expert_scale, b13, w2, w2_scales, w2_expert_scale, b2), gemm1_kernel, gemm2_kernel,
             out, poison)


@moe_experts_into.register_fake
def _(handle, hidden, topk_ids, topk_weights, expert_map, w13, w13_scales, w13_expert_scale, b13, w2, w2_scales,
      w2_expert_scale, b2, gemm1_kernel, gemm2_kernel, out, poison=False):
    return None


def _experts_batched(handle, hidden, expert_num_tokens, num_tokens, weights, gemm1_kernel, gemm2_kernel, out, poison):
    lib, s = _layer(handle)
    if lib.max_tokens_per_expert == 0:
        raise ValueError(f"moegen ({lib.path.name}): this build takes no batched calls (a W4A8 build quantizes its "
                         "hidden rows per token in its routing: use .experts)")
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3:
        got = f"shape {tuple(hidden.shape)}" if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        _fail("hidden_states", got, f"a 3-D tensor [{s.local_experts}, M, {s.hidden}] (rows grouped by local expert)")
    _check_layer_device(s, hidden)
    dev, M = hidden.device, hidden.shape[1]
    _check_tensor("hidden_states", hidden, (s.local_experts, M, s.hidden), (torch.bfloat16,), dev)
    if M > lib.max_tokens_per_expert:
        _fail("hidden_states", f"{M} rows per expert", f"at most {lib.max_tokens_per_expert} (32-bit row indices)")
    _check_tensor("expert_num_tokens", expert_num_tokens, (s.local_experts,), (torch.int32,), dev, alignment=4)
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or not 0 <= num_tokens <= lib.max_tokens:
        _fail("num_tokens", shown(num_tokens), f"the tokens the dispatch carried over all ranks, 0..{lib.max_tokens}")
    _check_weights(s, dev, *weights)
    _check_tensor("out", out, (s.local_experts, M, s.hidden), (torch.bfloat16,), dev)
    if poison:
        out.fill_(float("nan"))
    workspace = torch.empty(lib.workspace_bytes_batched(num_tokens, M), dtype=torch.uint8, device=dev)
    if poison:
        workspace.fill_(0xFF)
    args = BatchedArgs(num_tokens=num_tokens, max_tokens_per_expert=M, hidden=_ptr(hidden),
                       expert_num_tokens=_ptr(expert_num_tokens), weights=_weights_struct(*weights), out=_ptr(out),
                       workspace=_ptr(workspace), workspace_bytes=workspace.numel())
    # the kernels an experts-only call of as many tokens as these rows can hold would run
    tokens = min(num_tokens, -(-s.local_experts * M // s.top_k))
    _run(lib, lib.dll.moegen_forward_batched, args, *_kernels(handle, gemm1_kernel, gemm2_kernel, tokens), dev)


@torch.library.custom_op("moegen::moe_experts_batched", mutates_args=())
def moe_experts_batched(handle: int, hidden: torch.Tensor, expert_num_tokens: torch.Tensor, num_tokens: int,
                        w13: torch.Tensor, w13_scales: torch.Tensor, w13_expert_scale: torch.Tensor,
                        b13: Optional[torch.Tensor], w2: torch.Tensor, w2_scales: torch.Tensor,
                        w2_expert_scale: torch.Tensor, b2: Optional[torch.Tensor], gemm1_kernel: int,
                        gemm2_kernel: int, poison: bool = False) -> torch.Tensor:
    """bf16 [E_local, M, H]: row i < expert_num_tokens[e] of expert e is its output for hidden[e, i]
    (MoeLayer.experts_batched says what a count past num_tokens x top_k gives); the rows past the counts
    are left unwritten."""
    out = torch.empty_like(hidden) if isinstance(hidden, torch.Tensor) else None
    _experts_batched(handle, hidden, expert_num_tokens, num_tokens,
                     (w13, w13_scales, w13_expert_scale, b13, w2, w2_scales, w2_expert_scale, b2), gemm1_kernel,
                     gemm2_kernel, out, poison)
    return out


@moe_experts_batched.register_fake
def _(handle, hidden, expert_num_tokens, num_tokens, w13, w13_scales, w13_expert_scale, b13, w2, w2_scales,
      w2_expert_scale, b2, gemm1_kernel, gemm2_kernel, poison=False):
    return hidden.new_empty(hidden.shape)


@torch.library.custom_op("moegen::moe_experts_batched_into", mutates_args=("out",))
def moe_experts_batched_into(handle: int, hidden: torch.Tensor, expert_num_tokens: torch.Tensor, num_tokens: int,
                             w13: torch.Tensor, w13_scales: torch.Tensor, w13_expert_scale: torch.Tensor,
                             b13: Optional[torch.Tensor], w2: torch.Tensor, w2_scales: torch.Tensor,
                             w2_expert_scale: torch.Tensor, b2: Optional[torch.Tensor], gemm1_kernel: int,
                             gemm2_kernel: int, out: torch.Tensor, poison: bool = False) -> None:
    """As moe_experts_batched, written into the caller's bf16 [E_local, M, H] buffer."""
    _experts_batched(handle, hidden, expert_num_tokens, num_tokens,
                     (w13, w13_scales, w13_expert_scale, b13, w2, w2_scales, w2_expert_scale, b2), gemm1_kernel,
                     gemm2_kernel, out, poison)


@moe_experts_batched_into.register_fake
def _(handle, hidden, expert_num_tokens, num_tokens, w13, w13_scales, w13_expert_scale, b13, w2, w2_scales,
      w2_expert_scale, b2, gemm1_kernel, gemm2_kernel, out, poison=False):
    return None


@dataclass(frozen=True)
class MoeOutput:
    out: torch.Tensor  # bf16 [T, hidden]
    topk_ids: torch.Tensor  # int32 [T, top_k] global expert ids
    topk_weights: torch.Tensor  # float32 [T, top_k]


def _flat(weights: PreparedWeights) -> tuple:
    g1, g2 = weights.gemm1, weights.gemm2
    return g1.w, g1.scales, g1.expert_scale, g1.bias, g2.w, g2.scales, g2.expert_scale, g2.bias


class MoeLayer:
    """A loaded moegen build: call it with hidden states, router logits and prepared weights (the
    fused layer), or use .experts with your own routing."""

    def __init__(self, out_dir: Path, manifest, spec: ModelSpec, library: Library, gpu: GpuInfo,
                 dispatch_root: Path | None, device: int = 0):
        self.out_dir, self.manifest, self.spec, self.library, self.gpu = out_dir, manifest, spec, library, gpu
        self.weight_layout = manifest.weight_layout
        self.kernels: list[KernelConfig] = [parse_kernel_name(n) for n in library.kernel_names()]
        self.problem = ProblemKey.of(spec)
        self.dispatch, notes = find_dispatch(manifest.arch, gpu, self.problem, [k.name for k in self.kernels],
                                             user_root=dispatch_root)
        for note in notes:
            warn_once(note)
        _SHAPES[library.handle] = _LayerShape(spec.num_experts, spec.local_experts, spec.top_k, spec.hidden_size,
                                              spec.local_intermediate, spec.router.score_bias, spec.gemm1_bias,
                                              spec.gemm2_bias, self.weight_layout, device)
        _CHOOSE[library.handle] = self.choose_kernels
        self.device = torch.device("cuda", device)

    def choose_kernels(self, num_tokens: int) -> tuple[int, int]:
        """(gemm1, gemm2) kernel indices: from the dispatch table, else the documented heuristic
        (moegen.dispatch.heuristic_choice)."""
        pick = self.dispatch.choose(num_tokens) if self.dispatch is not None else None
        return pick if pick is not None else heuristic_choice(self.kernels, self.spec, num_tokens)

    def _check_prepared(self, weights) -> None:
        if not isinstance(weights, PreparedWeights):
            _fail("weights", type(weights).__name__, "moegen PreparedWeights (from layer.prepare or moegen.prepare)")
        if weights.layout != self.weight_layout:
            _fail("weights", f"prepared in layout {weights.layout!r}",
                  f"{self.weight_layout!r}, the layout this library's kernels read (prepare for it)")

    def __call__(self, hidden_states: torch.Tensor, router_logits: torch.Tensor, weights: PreparedWeights,
                 score_bias: torch.Tensor | None = None, kernels: tuple[int, int] | None = None,
                 poison: bool = False) -> MoeOutput:
        self._check_prepared(weights)
        k1, k2 = kernels if kernels is not None else (-1, -1)  # chosen in the op, by its T
        out, ids, w = torch.ops.moegen.moe_forward(self.library.handle, hidden_states, router_logits, score_bias,
                                                   *_flat(weights), k1, k2, poison)
        return MoeOutput(out, ids, w)

    def experts(self, hidden_states: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                weights: PreparedWeights, expert_map: torch.Tensor | None = None, out: torch.Tensor | None = None,
                kernels: tuple[int, int] | None = None, poison: bool = False) -> torch.Tensor:
        """sum_k topk_weights[t, k] * expert(topk_ids[t, k])(hidden[t]) over the slots whose expert is
        on this rank: expert_map (int32 [num_experts], global id -> local id or -1) places them, or,
        without one, this build's contiguous expert range.  Written into `out` when given."""
        self._check_prepared(weights)
        k1, k2 = kernels if kernels is not None else (-1, -1)  # chosen in the op, by its T
        if out is None:
            return torch.ops.moegen.moe_experts(self.library.handle, hidden_states, topk_ids, topk_weights,
                                                expert_map, *_flat(weights), k1, k2, poison)
        torch.ops.moegen.moe_experts_into(self.library.handle, hidden_states, topk_ids, topk_weights, expert_map,
                                          *_flat(weights), k1, k2, out, poison)
        return out

    def experts_batched(self, hidden_states: torch.Tensor, expert_num_tokens: torch.Tensor, weights: PreparedWeights,
                        num_tokens: int, out: torch.Tensor | None = None, kernels: tuple[int, int] | None = None,
                        poison: bool = False) -> torch.Tensor:
        """The experts on rows grouped by local expert, the layout a low-latency expert-parallel dispatch
        (DeepEP's; vLLM's BatchedExperts format) delivers: hidden_states bf16 [E_local, M, hidden], and
        expert_num_tokens int32 [E_local] (on the GPU, each clamped to [0, M]).  Row i < expert_num_tokens[e]
        of the result is expert e's output for hidden_states[e, i], unweighted (the combine weighs it);
        the other rows are not written.  num_tokens: the tokens the dispatch carried over all ranks; their
        num_tokens x top_k (token, expert) pairs bound this rank's rows (rows a count names past that
        bound, in expert order, come back NaN: num_tokens was too small), and the kernels are those an
        experts-only call of min(num_tokens, ceil(E_local x M / top_k)) tokens would run.  Written into
        `out` when given."""
        self._check_prepared(weights)
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
            _fail("num_tokens", shown(num_tokens), "the tokens the dispatch carried over all ranks, an integer >= 0")
        k1, k2 = kernels if kernels is not None else (-1, -1)  # chosen in the op, by its rows
        if out is None:
            return torch.ops.moegen.moe_experts_batched(self.library.handle, hidden_states, expert_num_tokens,
                                                        num_tokens, *_flat(weights), k1, k2, poison)
        torch.ops.moegen.moe_experts_batched_into(self.library.handle, hidden_states, expert_num_tokens, num_tokens,
                                                  *_flat(weights), k1, k2, out, poison)
        return out

    def prepare(self, *args, **kwargs) -> PreparedWeights:
        """moegen.prepare for this library's spec and weight layout."""
        from .prepare import prepare
        return prepare(self.spec, *args, layout=self.weight_layout, **kwargs)


# Environment variables the SM90 kernels read to override a choice of their own, for A/B runs.
BENCHMARK_SWITCHES = {"MOEGEN_GRID": ("tiles", "persistent"), "MOEGEN_GEMM2_WAIT": ("expert", "grid")}


def benchmark_switches() -> dict[str, str]:
    return {name: os.environ[name] for name in BENCHMARK_SWITCHES if os.environ.get(name)}


@functools.lru_cache(maxsize=None)
def _generator() -> str:
    """The digest of the generator this process would build with (its sources do not change under it)."""
    return generator_digest()


def load(out_dir: str | Path, spec: ModelSpec | None = None, device: torch.device | str | None = None,
         dispatch_root: str | Path | None = None) -> MoeLayer:
    """Load ``generated/<variant>/<arch>``; checks manifest, library, spec and GPU before use.
    dispatch_root: where user dispatch tables live (default: the build's output root's dispatch/)."""
    if not isinstance(out_dir, (str, os.PathLike)) or not os.fspath(out_dir):
        raise LoadError(f"out_dir = {out_dir!r}: expected a build directory (generated/<variant>/<arch>)")
    out_dir = Path(out_dir)
    for name, value in benchmark_switches().items():
        if value in BENCHMARK_SWITCHES[name]:
            warn_once(f"{name}={value} is set: the library's kernels take it over their own choice (a switch for "
                      "benchmarking; unset it to serve)")
        else:
            warn_once(f"{name}={shown(value)} is set and ignored: expected {' or '.join(BENCHMARK_SWITCHES[name])}")
    try:
        manifest = read_manifest(out_dir)
        verify_library(manifest)
    except ArtifactError as e:
        raise LoadError(str(e)) from None
    mpath = manifest.path
    built_by = manifest.data.get("generator")
    if isinstance(built_by, str) and built_by != _generator():
        warn_once(f"{mpath}: built by another version of moegen's generator than this one; `moegen build` with the "
                  "same options rebuilds it (loading it anyway)")
    if spec is not None and not isinstance(spec, ModelSpec):
        raise LoadError(f"spec: {type(spec).__name__}, expected a moegen ModelSpec (moegen.load_model)")
    try:
        spec_built = built_spec(manifest, spec)
    except ArtifactError as e:
        raise LoadError(str(e)) from None
    capability = manifest.data.get("compute_capability")
    if not (isinstance(capability, list) and len(capability) == 2):
        raise LoadError(f"{mpath}: field 'compute_capability' = {capability!r}: expected [major, minor]; rebuild")
    if not torch.cuda.is_available():
        raise LoadError("no CUDA GPU visible to PyTorch; moegen layers run on the GPU")
    try:
        dev = torch.device(device if device is not None else "cuda")
        if dev.type == "cuda" and dev.index is None:  # the current device, by its index: the layer keeps it
            dev = torch.device("cuda", torch.cuda.current_device())
        cap = torch.cuda.get_device_capability(dev)
    except (RuntimeError, ValueError, AssertionError) as e:
        raise LoadError(f"device {device!r}: {e}") from None
    if list(cap) != capability:
        raise LoadError(f"{mpath}: built for {manifest.arch} (compute capability {tuple(capability)}), but "
                        f"{torch.cuda.get_device_name(dev)} is {cap}; build with the matching --arch")
    if manifest.arch == "sm100":
        warn_once("SM100 kernels are compile-verified only: no B200 had run them when this moegen shipped. Run "
                  "`moegen check --arch sm100` once and report its output (README, 'Blackwell')")
    try:
        library = Library(manifest.library_path)
    except ArtifactError as e:
        raise LoadError(str(e)) from None
    info = library.build_info()
    if info.get("fingerprint") != manifest.fingerprint:
        raise LoadError(f"{manifest.library_path}: embeds fingerprint {str(info.get('fingerprint'))[:16]}, the "
                        f"manifest says {manifest.fingerprint[:16]}; rebuild")
    if list(library.kernel_names()) != list(manifest.kernels):
        raise LoadError(f"{manifest.library_path}: its kernel table differs from {mpath}'s; rebuild")
    root = Path(dispatch_root) if dispatch_root is not None else user_dir(out_dir.parent.parent)
    return MoeLayer(out_dir, manifest, spec_built, library, gpu_info(dev), root, dev.index)


def gpu_info(device: torch.device | str = "cuda") -> GpuInfo:
    """What a dispatch table is keyed by (GPU name, SM count) and what it records (driver, CUDA)."""
    props = torch.cuda.get_device_properties(device)
    return GpuInfo(name=props.name, sm_count=props.multi_processor_count, driver=driver_version(),
                   cuda=str(torch.version.cuda))


def driver_version() -> str:
    """The driver release as NVML reports it (e.g. 580.159.04), else the driver API version."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        buf = ctypes.create_string_buffer(96)
        if nvml.nvmlInit_v2() == 0 and nvml.nvmlSystemGetDriverVersion(buf, 96) == 0:
            return buf.value.decode()
    except OSError:
        pass
    try:
        v = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v)) == 0:
            return f"cuda-driver-api-{v.value}"
    except OSError:
        pass
    return "unknown"
