"""One MoE layer's weights straight from a model directory in its published layout (config.json plus
safetensors, sharded or not): this rank's experts (its EP range and TP slice, read lazily through
memory-mapped safetensors, nothing else), prepared for the kernels, and the router's weights.

Layouts (the model directory's config.json `model_type` picks one):

* ``gpt_oss``: ``model.layers.{i}.mlp.experts.{gate_up,down}_proj_{blocks,scales,bias}`` (MXFP4 blocks
  [E, N, K/32, 16] and e8m0 scales [E, N, K/32], gate and up rows interleaved), router
  ``model.layers.{i}.mlp.router.{weight,bias}``.
* ``deepseek_v4``: ``layers.{i}.ffn.experts.{j}.{w1,w3,w2}.{weight,scale}`` (two e2m1 per byte [N, K/2],
  e8m0 scales [N, K/32]; w1 gate, w3 up, w2 down), router ``layers.{i}.ffn.gate.weight`` with
  ``.bias`` (the selection bias) or, for the first ``num_hash_layers`` layers, ``.tid2eid``.
* ``deepseek_v3`` (and the models that reuse its layer and names: ``deepseek_v32`` DeepSeek-V3.2,
  ``kimi_k2`` Kimi-K2, ``glm4_moe`` GLM-4.5 and later):
  ``model.layers.{i}.mlp.experts.{j}.{gate,up,down}_proj.{weight,weight_scale_inv}`` (FP8 e4m3 with one
  fp32 scale per 128 x 128 block; GLM's releases bf16), quantized to MXFP4 with moegen.mxfp4; router
  ``model.layers.{i}.mlp.gate.{weight,e_score_correction_bias}``.
* ``qwen3_moe``: ``model.layers.{i}.mlp.experts.{j}.{gate,up,down}_proj.weight`` (bf16), quantized to
  MXFP4; router ``model.layers.{i}.mlp.gate.weight``.
* ``minimax_m2``: ``model.layers.{i}.block_sparse_moe.experts.{j}.{w1,w3,w2}.{weight,weight_scale_inv}``
  (w1 gate, w3 up, w2 down; FP8 with 128 x 128 block scales), quantized to MXFP4; router
  ``model.layers.{i}.block_sparse_moe.gate.weight`` (float32) and ``.block_sparse_moe.e_score_correction_bias``.

The float layouts read every release format their models ship in, as config.json's
``quantization_config`` says: none, bf16 (Qwen3, GLM-4.5, DeepSeek-V3 converted to bf16); ``fp8`` with
128 x 128 blocks (DeepSeek-V3 and V3.2, Kimi-K2, Qwen3's FP8 releases: ``weight_scale_inv`` per block);
compressed-tensors ``float-quantized`` FP8 per output channel (GLM-4.5's FP8 releases: ``weight_scale``
[rows, 1]).  Other quantizations (Kimi-K2-Thinking's int4 compressed-tensors) are refused by name.

config.json, where the directory has one, must describe the spec's layer (every size, router and
activation field moegen reads from it), and `layer` must be one of its MoE layers.  Every missing
tensor, wrong shape or dtype, and every such mismatch is a one-line CheckpointError naming the tensor
or the config field, its file and what was expected.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .layout import SM90_ATOMS, PreparedWeights
from .mxfp4 import quantize
from .paths import read_small_file
from .hf_config import config_key, spec_from_config_data
from .spec import ModelSpec, SpecError, shown

FP8_BLOCK = 128  # DeepSeek-V3's FP8 weights: one scale per 128 x 128 block
# How a layout's experts are stored (see the module's docstring).
MXFP4, BF16, FP8_BLOCKS, FP8_CHANNELS = "mxfp4", "bf16", "fp8 128x128 blocks", "fp8 per channel"
DEEPSEEK_V3_LAYER = ("deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe")  # one layer, names and router
# What a model directory without a config.json holds: the published release's format.
PUBLISHED = {"gpt_oss": MXFP4, "deepseek_v4": MXFP4, "qwen3_moe": BF16, "glm4_moe": BF16,
             "deepseek_v3": FP8_BLOCKS, "deepseek_v32": FP8_BLOCKS, "kimi_k2": FP8_BLOCKS, "minimax_m2": FP8_BLOCKS}


class CheckpointError(ValueError):
    pass


@dataclass(frozen=True)
class RawExperts:
    """This rank's experts as MXFP4 checkpoint tensors in moegen's order (gate rows, then up rows)."""
    w13: torch.Tensor  # uint8 [E_local, 2 I_local, H/2]
    s13: torch.Tensor  # uint8 [E_local, 2 I_local, H/32]
    w2: torch.Tensor  # uint8 [E_local, H, I_local/2]
    s2: torch.Tensor  # uint8 [E_local, H, I_local/32]
    b13: torch.Tensor | None  # float32 [E_local, 2 I_local]
    b2: torch.Tensor | None  # float32 [E_local, H]: whole on TP rank 0, zero on the others (added once)


@dataclass(frozen=True)
class LayerWeights:
    experts: PreparedWeights
    router_weight: torch.Tensor  # [E, H] as stored
    router_bias: torch.Tensor | None  # [E]: gpt-oss's router is a linear layer with a bias
    score_bias: torch.Tensor | None  # float32 [E]: DeepSeek's selection (correction) bias
    tid2eid: torch.Tensor | None  # int32 [vocab, top_k]: DeepSeek-V4's hash layers

    def router_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 [T, E] logits of the router for bf16 hidden states [T, H]."""
        logits = hidden.float() @ self.router_weight.float().t()
        return logits + self.router_bias.float() if self.router_bias is not None else logits


class Checkpoint:
    """Lazy access to the tensors of a safetensors checkpoint directory (one file or an index)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self._handles: dict[Path, object] = {}
        if not self.dir.is_dir():
            raise CheckpointError(f"{self.dir}: not a directory (expected a model directory with config.json and "
                                  "safetensors files)")
        index = self.dir / "model.safetensors.index.json"
        if index.is_file():
            try:
                weight_map = json.loads(read_small_file(index, 1 << 30))["weight_map"]
                self.files = {name: self.dir / file for name, file in weight_map.items()
                              if isinstance(name, str) and isinstance(file, str)}
                if len(self.files) != len(weight_map):
                    raise TypeError("a tensor name or file name is not a string")
            except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
                raise CheckpointError(f"{index}: expected {{\"weight_map\": {{tensor: file name}}}} "
                                      f"({shown(' '.join(str(e).split()))})") from None
            for name, path in self.files.items():
                if path.name != weight_map[name] or path.name in ("", ".", ".."):
                    raise CheckpointError(f"{index}: weight_map[{shown(name)}] = {shown(weight_map[name])}, expected "
                                          "the name of a file in the model directory")
        else:
            singles = sorted(self.dir.glob("*.safetensors"))
            if not singles:
                raise CheckpointError(f"{self.dir}: no model.safetensors.index.json and no *.safetensors file")
            self.files = {}
            for path in singles:
                for name in self._open(path).keys():
                    if name in self.files:  # a stale copy beside the checkpoint: which one is meant is unknowable
                        raise CheckpointError(f"{self.dir}: tensor {shown(name)} is in both {shown(self.files[name].name)} "
                                              f"and {shown(path.name)} (expected each tensor in one file, or an index "
                                              "naming it)")
                    self.files[name] = path

    def config(self) -> dict:
        path = self.dir / "config.json"
        try:
            data = json.loads(read_small_file(path, 1 << 20))
        except (OSError, ValueError, RecursionError) as e:
            raise CheckpointError(f"{path}: cannot read the model's config ({shown(' '.join(str(e).split()))})") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{path}: expected a JSON object")
        return data

    def _open(self, path: Path):
        if path not in self._handles:
            from safetensors import safe_open
            try:
                self._handles[path] = safe_open(str(path), framework="pt")
            except Exception as e:  # noqa: BLE001 - safetensors raises several types
                raise CheckpointError(f"{path}: cannot open as safetensors ({e})") from None
        return self._handles[path]

    def has(self, name: str) -> bool:
        return name in self.files

    def slice(self, name: str, shape: tuple, dtypes: tuple, index=None, e8m0: bool = False) -> torch.Tensor:
        """Tensor `name` (checked: shape and dtype), or the part `index` selects, read lazily.  Float
        values must be finite, and e8m0 scales (`e8m0`) not the NaN code: either would turn every
        token routed to that expert into NaN.  Errors give the element's index in the whole tensor."""
        if name not in self.files:
            raise CheckpointError(f"{self.dir}: no tensor {name!r} (expected {_dtype_names(dtypes)} {tuple(shape)})")
        path = self.files[name]
        handle = self._open(path)
        try:
            part = handle.get_slice(name)
        except Exception:  # noqa: BLE001 - safetensors raises its own error type
            raise CheckpointError(f"{path}: no tensor {name!r}, though the index places it in this file "
                                  f"(expected {_dtype_names(dtypes)} {tuple(shape)})") from None
        got_shape, got_dtype = tuple(part.get_shape()), part.get_dtype()
        if got_shape != tuple(shape) or got_dtype not in dtypes:
            raise CheckpointError(f"{path}: tensor {name!r} is {got_dtype} {got_shape}, expected "
                                  f"{_dtype_names(dtypes)} {tuple(shape)}")
        try:
            t = part[index] if index is not None else part[:]
        except Exception as e:  # noqa: BLE001 - a truncated or damaged file
            raise CheckpointError(f"{path}: cannot read tensor {name!r} ({shown(' '.join(str(e).split()))})") from None
        starts = [0 if i.start is None else i.start for i in (index or ())] + [0] * (t.dim() - len(index or ()))
        if t.dtype in (torch.bfloat16, torch.float16, torch.float32) and not bool(torch.isfinite(t).all()):
            at = [a + b for a, b in zip((~torch.isfinite(t)).nonzero()[0].tolist(), starts)]
            raise CheckpointError(f"{path}: tensor {name!r} holds {t[tuple(a - b for a, b in zip(at, starts))].item()} "
                                  f"at {at}, expected finite values")
        if e8m0 and bool((t.view(torch.uint8) == 255).any()):  # e8m0's one NaN code
            at = [a + b for a, b in zip((t.view(torch.uint8) == 255).nonzero()[0].tolist(), starts)]
            raise CheckpointError(f"{path}: tensor {name!r} holds the e8m0 scale 255 (NaN) at {at}, expected "
                                  "finite scales")
        return t


def _dtype_names(dtypes: tuple) -> str:
    return " or ".join(dtypes)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """Raw bytes of a uint8/int8/float8 tensor as uint8."""
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


def _padded(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """t zero-padded along dim to size: the columns a TP split pads (ModelSpec.tp_slice).  Zero codes
    make the padded values zero whatever their scale; zero scale bytes leave prepare's per-expert shift,
    which follows the largest scale, unchanged."""
    missing = size - t.shape[dim]
    return t if missing == 0 else torch.cat((t, t.new_zeros(*t.shape[:dim], missing, *t.shape[dim + 1:])), dim)


def _described_layer(path: Path, config: dict, spec: ModelSpec, model_type: str) -> None:
    """The layer config.json describes must be the spec's (sizes, router, activation, biases): a spec
    that differs would load cleanly and compute another layer."""
    try:
        described = spec_from_config_data(config, str(path), spec.name, model_type).to_dict()
    except SpecError as e:
        raise CheckpointError(str(e)) from None
    wanted = spec.to_dict()
    for field in ("num_experts", "hidden_size", "intermediate_size", "router", "activation", "bias"):
        theirs, mine = described[field], wanted[field]
        pairs = [(f"{field}.{k}", theirs[k], mine[k]) for k in theirs] if isinstance(theirs, dict) else \
            [(field, theirs, mine)]
        for name, got, expected in pairs:
            if got != expected:
                key = config_key(model_type, name)
                where = f"field '{key}' = {shown(got)}" if key in config or key != name else \
                    f"{name} = {shown(got)} (the {model_type} architecture's)"
                raise CheckpointError(f"{path}: {where}, but spec {spec.name} has {name} = {shown(expected)}")


def _int_field(path: Path, config: dict, key: str, minimum: int = 0) -> int | None:
    v = config.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise CheckpointError(f"{path}: field '{key}' = {shown(v)}, expected an integer >= {minimum}")
    return v


def _check_layer(path: Path, config: dict, model_type: str, layer: int) -> None:
    """layer must be one of the model's MoE layers, where config.json says which those are."""
    layers = _int_field(path, config, "num_hidden_layers", 1)
    if model_type in DEEPSEEK_V3_LAYER + ("deepseek_v4",) and layers is not None:
        layers += _int_field(path, config, "num_nextn_predict_layers") or 0  # the MTP layers follow, MoE too
    if layers is not None and layer >= layers:
        raise CheckpointError(f"layer: {layer}, expected 0..{layers - 1} ({path}: fields 'num_hidden_layers' and, "
                              "for the DeepSeek-style layers, 'num_nextn_predict_layers')")
    if model_type in DEEPSEEK_V3_LAYER + ("deepseek_v4",):
        dense = _int_field(path, config, "first_k_dense_replace") or 0
        every = _int_field(path, config, "moe_layer_freq", 1) or 1
        if layer < dense or layer % every:
            raise CheckpointError(f"layer: {layer} is a dense MLP, expected a MoE layer: >= {dense} and a multiple of "
                                  f"{every} ({path}: fields 'first_k_dense_replace', 'moe_layer_freq')")
    if model_type == "qwen3_moe":
        step = _int_field(path, config, "decoder_sparse_step", 1) or 1
        dense = config.get("mlp_only_layers") or []
        if not isinstance(dense, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in dense):
            raise CheckpointError(f"{path}: field 'mlp_only_layers' = {shown(dense)}, expected a list of layer indices")
        if layer in dense or (layer + 1) % step:
            raise CheckpointError(f"layer: {layer} is a dense MLP ({path}: fields 'mlp_only_layers' = {shown(dense)}, "
                                  f"'decoder_sparse_step' = {step}), expected a MoE layer")


def _float_format(path: Path, config: dict, model_type: str) -> str:
    """How the layout's experts are stored, from config.json's quantization_config; anything else moegen
    does not read is refused here, by name."""
    quant = config.get("quantization_config")
    if model_type == "deepseek_v4":
        dtype = config.get("expert_dtype", "fp4")
        if dtype != "fp4":
            raise CheckpointError(f"{path}: field 'expert_dtype' = {shown(dtype)}, expected 'fp4' (moegen reads "
                                  "DeepSeek-V4's MXFP4 experts)")
        return MXFP4
    if model_type == "gpt_oss":  # hf_config refuses a quant_method other than mxfp4
        if not quant:
            raise CheckpointError(f"{path}: field 'quantization_config' = {shown(quant)}, expected gpt-oss's mxfp4 "
                                  "release (moegen reads its MXFP4 experts, not a bf16 conversion)")
        return MXFP4
    if quant is None:
        return BF16
    q = quant if isinstance(quant, dict) else {}
    if q.get("quant_method") == "fp8" and q.get("weight_block_size") in (None, [FP8_BLOCK, FP8_BLOCK]):
        return FP8_BLOCKS
    groups = q.get("config_groups")
    weights = [g.get("weights") if isinstance(g, dict) else None for g in groups.values()] \
        if isinstance(groups, dict) and groups else [None]
    if q.get("quant_method") == "compressed-tensors" and q.get("format") == "float-quantized" and all(
            isinstance(w, dict) and (w.get("num_bits"), w.get("type"), w.get("strategy")) == (8, "float", "channel")
            for w in weights):
        return FP8_CHANNELS
    raise CheckpointError(f"{path}: field 'quantization_config' = {shown(quant)}, expected none (bf16 experts), "
                          f"quant_method 'fp8' with weight_block_size [{FP8_BLOCK}, {FP8_BLOCK}], or compressed-tensors "
                          "float-quantized with 8-bit float per-channel weights")


# --- the layouts ------------------------------------------------------------------------------------

def _gpt_oss(ck: Checkpoint, spec: ModelSpec, layer: int, tp_rank: int, stored: str,
             device: torch.device) -> tuple[RawExperts, dict]:
    E, H, I = spec.num_experts, spec.hidden_size, spec.intermediate_size
    e0, e1 = spec.expert_begin, spec.expert_begin + spec.local_experts
    (c0, c1), Il = spec.tp_slice(tp_rank), spec.local_intermediate
    p = f"model.layers.{layer}.mlp"
    # gate/up rows interleaved: columns c0:c1 are rows 2 c0 .. 2 c1, contiguous
    rows = slice(2 * c0, 2 * c1)
    w13 = ck.slice(f"{p}.experts.gate_up_proj_blocks", (E, 2 * I, H // 32, 16), ("U8",), (slice(e0, e1), rows))
    s13 = ck.slice(f"{p}.experts.gate_up_proj_scales", (E, 2 * I, H // 32), ("U8",), (slice(e0, e1), rows),
                   e8m0=True)
    b13 = ck.slice(f"{p}.experts.gate_up_proj_bias", (E, 2 * I), ("BF16", "F32"), (slice(e0, e1), rows))
    k = slice(c0 // 32, c1 // 32)
    w2 = ck.slice(f"{p}.experts.down_proj_blocks", (E, H, I // 32, 16), ("U8",), (slice(e0, e1), slice(None), k))
    s2 = ck.slice(f"{p}.experts.down_proj_scales", (E, H, I // 32), ("U8",), (slice(e0, e1), slice(None), k),
                  e8m0=True)
    b2 = ck.slice(f"{p}.experts.down_proj_bias", (E, H), ("BF16", "F32"), (slice(e0, e1),)).float()
    El = e1 - e0

    def deinterleave(x):  # gate, up, gate, up, ... -> gate rows then up rows, each padded to Il
        return torch.cat((_padded(x[:, 0::2], 1, Il), _padded(x[:, 1::2], 1, Il)), dim=1)

    raw = RawExperts(deinterleave(w13.reshape(El, 2 * (c1 - c0), H // 2)), deinterleave(s13),
                     _padded(w2.reshape(El, H, (c1 - c0) // 2), 2, Il // 2).contiguous(),
                     _padded(s2, 2, Il // 32).contiguous(), deinterleave(b13.float()),
                     b2 if tp_rank == 0 else torch.zeros_like(b2))
    router = dict(router_weight=ck.slice(f"{p}.router.weight", (E, H), ("BF16", "F32")),
                  router_bias=ck.slice(f"{p}.router.bias", (E,), ("BF16", "F32")))
    return raw, router


def _deepseek_v4(ck: Checkpoint, spec: ModelSpec, layer: int, tp_rank: int, stored: str,
                 device: torch.device) -> tuple[RawExperts, dict]:
    E, H, I = spec.num_experts, spec.hidden_size, spec.intermediate_size
    (c0, c1), Il = spec.tp_slice(tp_rank), spec.local_intermediate
    p = f"layers.{layer}.ffn"
    w13, s13, w2, s2 = [], [], [], []
    for j in range(spec.expert_begin, spec.expert_begin + spec.local_experts):
        gate_up = []
        for proj in ("w1", "w3"):  # w1 gate, w3 up: rows c0:c1 of each
            gate_up.append((_bytes(ck.slice(f"{p}.experts.{j}.{proj}.weight", (I, H // 2), ("I8", "U8"),
                                            (slice(c0, c1),))),
                            _bytes(ck.slice(f"{p}.experts.{j}.{proj}.scale", (I, H // 32), ("F8_E8M0", "U8"),
                                            (slice(c0, c1),), e8m0=True))))
        w13.append(torch.cat([_padded(g[0], 0, Il) for g in gate_up]))
        s13.append(torch.cat([_padded(g[1], 0, Il) for g in gate_up]))
        w2.append(_padded(_bytes(ck.slice(f"{p}.experts.{j}.w2.weight", (H, I // 2), ("I8", "U8"),
                                          (slice(None), slice(c0 // 2, c1 // 2)))), 1, Il // 2))
        s2.append(_padded(_bytes(ck.slice(f"{p}.experts.{j}.w2.scale", (H, I // 32), ("F8_E8M0", "U8"),
                                          (slice(None), slice(c0 // 32, c1 // 32)), e8m0=True)), 1, Il // 32))
    raw = RawExperts(torch.stack(w13), torch.stack(s13), torch.stack(w2), torch.stack(s2), None, None)
    router = dict(router_weight=ck.slice(f"{p}.gate.weight", (E, H), ("BF16", "F32")))
    if layer < spec.router.hash_layers:
        name = f"{p}.gate.tid2eid"
        table = ck.slice(name, (_rows(ck, name), spec.top_k), ("I32", "I64"))
        outside = (table < 0) | (table >= E)
        if bool(outside.any()):  # hash_route would drop those slots: tokens with fewer experts, silently
            at = outside.nonzero()[0].tolist()
            raise CheckpointError(f"{ck.files[name]}: tensor {name!r} holds expert {table[tuple(at)].item()} at {at}, "
                                  f"expected 0..{E - 1}")
        router["tid2eid"] = table.to(torch.int32)
    else:
        router["score_bias"] = ck.slice(f"{p}.gate.bias", (E,), ("F32", "BF16")).float()
    return raw, router


def _rows(ck: Checkpoint, name: str) -> int:
    """The first dimension of a tensor whose length the spec does not fix (the vocabulary)."""
    if not ck.has(name):
        raise CheckpointError(f"{ck.dir}: no tensor {name!r} (a hash-routed layer's token-id table)")
    try:
        shape = ck._open(ck.files[name]).get_slice(name).get_shape()
    except Exception:  # noqa: BLE001 - safetensors raises its own error type
        raise CheckpointError(f"{ck.files[name]}: no tensor {name!r}, though the index places it in this file "
                              "(a hash-routed layer's token-id table)") from None
    if len(shape) != 2:
        raise CheckpointError(f"{ck.files[name]}: tensor {name!r} has shape {tuple(shape)}, expected [vocabulary, "
                              "top_k] (a hash-routed layer's token-id table)")
    return shape[0]


def _dequant_fp8_block(w: torch.Tensor, scale_inv: torch.Tensor, r0: int, c0: int) -> torch.Tensor:
    """float32 of an FP8 slice starting at (r0, c0) of its tensor; scale_inv holds the slice's blocks."""
    rows = (torch.arange(w.shape[0], device=w.device) + r0) // FP8_BLOCK - r0 // FP8_BLOCK
    cols = (torch.arange(w.shape[1], device=w.device) + c0) // FP8_BLOCK - c0 // FP8_BLOCK
    return w.float() * scale_inv[rows][:, cols]


def _quantized(ck: Checkpoint, name: str, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not bool(torch.isfinite(w).all()):
        raise CheckpointError(f"{ck.files[name]}: tensor {name!r} holds NaN or inf (after its block scales); "
                              f"expected finite weights")
    return quantize(w)


def _float_experts(ck: Checkpoint, spec: ModelSpec, prefix: str, tp_rank: int, stored: str, device: torch.device,
                   projections: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> RawExperts:
    """Float (bf16, or FP8 with block or channel scales) experts quantized to MXFP4 on `device`: a GPU's
    spares the CPU the work (2 cores take about 4 s per DeepSeek-V3 expert, 17 minutes a layer).  prefix
    and projections name the layout's tensors: {prefix}.{expert}.{gate, up, down projection}.weight."""
    H, I = spec.hidden_size, spec.intermediate_size
    (c0, c1), Il = spec.tp_slice(tp_rank), spec.local_intermediate
    gate_name, up_name, down_name = projections
    dtypes = ("BF16", "F16", "F32") if stored == BF16 else ("F8_E4M3",)

    def read(name: str, shape: tuple, rows: slice, cols: slice) -> torch.Tensor:
        w = ck.slice(f"{name}.weight", shape, dtypes, (rows, cols)).to(device)
        if stored == BF16:
            return w.float()
        if stored == FP8_CHANNELS:  # one scale per output row
            s = ck.slice(f"{name}.weight_scale", (shape[0], 1), ("F32", "BF16"), (rows,))
            return w.float() * s.float().to(device)
        blocks = (-(-shape[0] // FP8_BLOCK), -(-shape[1] // FP8_BLOCK))
        r0, c0_ = rows.start or 0, cols.start or 0
        r_end, c_end = rows.stop or shape[0], cols.stop or shape[1]
        s = ck.slice(f"{name}.weight_scale_inv", blocks, ("F32", "BF16"),
                     (slice(r0 // FP8_BLOCK, -(-r_end // FP8_BLOCK)), slice(c0_ // FP8_BLOCK, -(-c_end // FP8_BLOCK))))
        return _dequant_fp8_block(w, s.float().to(device), r0, c0_)

    w13, s13, w2, s2 = [], [], [], []
    for j in range(spec.expert_begin, spec.expert_begin + spec.local_experts):
        gate = read(f"{prefix}.{j}.{gate_name}", (I, H), slice(c0, c1), slice(None))
        up = read(f"{prefix}.{j}.{up_name}", (I, H), slice(c0, c1), slice(None))
        down = read(f"{prefix}.{j}.{down_name}", (H, I), slice(None), slice(c0, c1))
        (qg, sg), (qu, su), (q2, sc2) = (_quantized(ck, f"{prefix}.{j}.{n}.weight", w) for n, w in
                                         ((gate_name, gate), (up_name, up), (down_name, down)))
        w13.append(torch.cat((_padded(qg, 0, Il), _padded(qu, 0, Il))))
        s13.append(torch.cat((_padded(sg, 0, Il), _padded(su, 0, Il))))
        w2.append(_padded(q2, 1, Il // 2))
        s2.append(_padded(sc2, 1, Il // 32))
    return RawExperts(torch.stack(w13), torch.stack(s13), torch.stack(w2), torch.stack(s2), None, None)


def _deepseek_v3(ck: Checkpoint, spec: ModelSpec, layer: int, tp_rank: int, stored: str,
                 device: torch.device) -> tuple[RawExperts, dict]:
    E, H = spec.num_experts, spec.hidden_size
    p = f"model.layers.{layer}.mlp.gate"
    return _float_experts(ck, spec, f"model.layers.{layer}.mlp.experts", tp_rank, stored, device), dict(
        router_weight=ck.slice(f"{p}.weight", (E, H), ("BF16", "F32")),
        score_bias=ck.slice(f"{p}.e_score_correction_bias", (E,), ("F32", "BF16")).float())


def _qwen3_moe(ck: Checkpoint, spec: ModelSpec, layer: int, tp_rank: int, stored: str,
               device: torch.device) -> tuple[RawExperts, dict]:
    return _float_experts(ck, spec, f"model.layers.{layer}.mlp.experts", tp_rank, stored, device), dict(
        router_weight=ck.slice(f"model.layers.{layer}.mlp.gate.weight", (spec.num_experts, spec.hidden_size),
                               ("BF16", "F32")))


def _minimax_m2(ck: Checkpoint, spec: ModelSpec, layer: int, tp_rank: int, stored: str,
                device: torch.device) -> tuple[RawExperts, dict]:
    E, H = spec.num_experts, spec.hidden_size
    p = f"model.layers.{layer}.block_sparse_moe"
    return _float_experts(ck, spec, p + ".experts", tp_rank, stored, device, ("w1", "w3", "w2")), dict(
        router_weight=ck.slice(f"{p}.gate.weight", (E, H), ("F32", "BF16")),
        score_bias=ck.slice(f"{p}.e_score_correction_bias", (E,), ("F32", "BF16")).float())


LAYOUTS = {"gpt_oss": _gpt_oss, "deepseek_v4": _deepseek_v4, "qwen3_moe": _qwen3_moe, "minimax_m2": _minimax_m2,
           **{t: _deepseek_v3 for t in DEEPSEEK_V3_LAYER}}


def load_raw_experts(checkpoint_dir: str | Path, spec: ModelSpec, layer: int, tp_rank: int = 0,
                     model_type: str | None = None, device: torch.device | str = "cpu") -> tuple[RawExperts, dict]:
    """(this rank's raw experts, the router's tensors) of MoE layer `layer`.  Float checkpoints are
    quantized to MXFP4 on `device` (their raw experts are returned there; MXFP4 ones are read as stored)."""
    if not isinstance(spec, ModelSpec):
        raise CheckpointError(f"spec: {type(spec).__name__}, expected a moegen ModelSpec")
    if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
        raise CheckpointError(f"layer: {shown(layer)}, expected a layer index >= 0")
    if isinstance(tp_rank, bool) or not isinstance(tp_rank, int) or not 0 <= tp_rank < spec.parallel.tp_size:
        raise CheckpointError(f"tp_rank: {shown(tp_rank)}, expected 0..{spec.parallel.tp_size - 1} (the spec's tp_size)")
    if not isinstance(checkpoint_dir, (str, os.PathLike)) or not os.fspath(checkpoint_dir):
        raise CheckpointError(f"checkpoint_dir: {shown(checkpoint_dir)}, expected a model directory")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise CheckpointError(f"device: {shown(device)}, expected a torch device ({' '.join(str(e).split())})") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise CheckpointError(f"device: {shown(str(device))}, expected cpu or one of the {count} CUDA devices "
                                  "PyTorch sees")
    ck = Checkpoint(checkpoint_dir)
    path = ck.dir / "config.json"
    config = ck.config() if model_type is None or path.is_file() else {}
    model_type = model_type or config.get("model_type")
    if not isinstance(model_type, str) or model_type not in LAYOUTS:
        raise CheckpointError(f"{path}: model_type {shown(model_type)}, expected one of "
                              f"{', '.join(LAYOUTS)} (the layouts moegen loads)")
    stored = PUBLISHED[model_type]
    if path.is_file():
        _described_layer(path, config, spec, model_type)
        _check_layer(path, config, model_type, layer)
        stored = _float_format(path, config, model_type)
    return LAYOUTS[model_type](ck, spec, layer, tp_rank, stored, device)


def load_experts(checkpoint_dir: str | Path, spec: ModelSpec, layer: int, tp_rank: int = 0,
                 device: torch.device | str = "cpu", layout: str = SM90_ATOMS.name,
                 model_type: str | None = None) -> LayerWeights:
    """MoE layer `layer` of a model directory: this rank's experts (the spec's EP range, TP slice
    `tp_rank` of its tp_size) prepared in `layout` on `device`, and the router's tensors there too."""
    from .prepare import PACKERS, prepare
    if not isinstance(layout, str) or layout not in PACKERS:  # before the load, which can take minutes
        raise CheckpointError(f"layout: {shown(layout)}, expected one of {', '.join(PACKERS)} (MoeLayer.weight_layout "
                              "names the one a library reads)")
    raw, router = load_raw_experts(checkpoint_dir, spec, layer, tp_rank, model_type, device)
    dev = torch.device(device)
    prepared = prepare(spec, raw.w13.to(dev), raw.s13.to(dev), raw.w2.to(dev), raw.s2.to(dev),
                       None if raw.b13 is None else raw.b13.to(dev), None if raw.b2 is None else raw.b2.to(dev),
                       layout=layout)
    moved = {k: v.to(dev) for k, v in router.items()}
    return LayerWeights(prepared, moved["router_weight"], moved.get("router_bias"), moved.get("score_bias"),
                        moved.get("tid2eid"))
