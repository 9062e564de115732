"""Runtime: load a built directory, check it against the GPU and the spec, run the layer.

The library has a plain C ABI (ctypes, no libtorch link); the layer is exposed as the PyTorch
custom op ``moegen::moe_forward`` (CUDA-graph capturable: no host syncs, every buffer comes from
PyTorch's allocator).
"""
from __future__ import annotations

import ctypes
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from .build import ABI_VERSION, MANIFEST_SCHEMA, file_sha256
from .config_space import KernelConfig
from .naming import parse_kernel_name
from .prepare import PreparedWeights
from .spec import ModelSpec, model_from_dict
from .tune import GpuInfo, heuristic_choice, load_dispatch, warn_once

ARCH_CAPABILITY = {"sm90": (9, 0)}  # sm_90a code runs on compute capability 9.0 only


class LoadError(RuntimeError):
    """The built directory cannot serve this GPU or spec; the message says why."""


class _Args(ctypes.Structure):
    _fields_ = [("num_tokens", ctypes.c_int32), ("logits_dtype", ctypes.c_int32),
                ("hidden", ctypes.c_void_p), ("router_logits", ctypes.c_void_p), ("score_bias", ctypes.c_void_p),
                ("w13", ctypes.c_void_p), ("w13_scales", ctypes.c_void_p), ("w13_expert_scale", ctypes.c_void_p),
                ("b13", ctypes.c_void_p), ("w2", ctypes.c_void_p), ("w2_scales", ctypes.c_void_p),
                ("w2_expert_scale", ctypes.c_void_p), ("b2", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("topk_ids", ctypes.c_void_p), ("topk_weights", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_size_t)]


_LIBS: dict[int, "Library"] = {}
_LIBS_LOCK = threading.Lock()


class Library:
    def __init__(self, path: Path):
        self.path = path
        self.dll = ctypes.CDLL(str(path))
        d = self.dll
        d.moegen_forward.argtypes = [ctypes.POINTER(_Args), ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        d.moegen_forward.restype = ctypes.c_int
        d.moegen_workspace_bytes.argtypes = [ctypes.c_int32]
        d.moegen_workspace_bytes.restype = ctypes.c_size_t
        d.moegen_last_error.restype = ctypes.c_char_p
        d.moegen_build_info.restype = ctypes.c_char_p
        d.moegen_kernel_name.argtypes = [ctypes.c_int]
        d.moegen_kernel_name.restype = ctypes.c_char_p
        with _LIBS_LOCK:
            self.handle = len(_LIBS)
            _LIBS[self.handle] = self

    def build_info(self) -> dict:
        return json.loads(self.dll.moegen_build_info().decode())

    def kernel_names(self) -> list[str]:
        return [self.dll.moegen_kernel_name(i).decode() for i in range(self.dll.moegen_num_kernels())]


def _check_tensor(name: str, t: torch.Tensor, shape: tuple, dtypes: tuple, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise ValueError(f"{name}: dtype {t.dtype}, expected {' or '.join(map(str, dtypes))}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {tuple(shape)}")
    if t.device != device:
        raise ValueError(f"{name}: on {t.device}, expected {device} (the device of hidden_states)")
    if not t.is_contiguous():
        raise ValueError(f"{name}: not contiguous; call .contiguous() first")
    if t.numel() and t.data_ptr() % 16:
        raise ValueError(f"{name}: data pointer {t.data_ptr():#x} is not 16-byte aligned (vector loads need it)")


def _ptr(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


@torch.library.custom_op("moegen::moe_forward", mutates_args=())
def moe_forward(handle: int, hidden: torch.Tensor, router_logits: torch.Tensor, score_bias: Optional[torch.Tensor],
                w13: torch.Tensor, w13_scales: torch.Tensor, w13_expert_scale: torch.Tensor,
                b13: Optional[torch.Tensor], w2: torch.Tensor, w2_scales: torch.Tensor,
                w2_expert_scale: torch.Tensor, b2: Optional[torch.Tensor], top_k: int, gemm1_kernel: int,
                gemm2_kernel: int, poison: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """poison=True fills outputs and workspace with NaN/garbage first (tests: every element must be written)."""
    lib = _LIBS[handle]
    T, H = hidden.shape
    dev = hidden.device
    out = torch.empty((T, H), dtype=torch.bfloat16, device=dev)
    ids = torch.empty((T, top_k), dtype=torch.int32, device=dev)
    weights = torch.empty((T, top_k), dtype=torch.float32, device=dev)
    ws_bytes = lib.dll.moegen_workspace_bytes(T)
    workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=dev)
    if poison:
        out.fill_(float("nan"))
        ids.fill_(-7)
        weights.fill_(float("nan"))
        workspace.fill_(0xFF)  # NaN as bf16/f32, -1 as int32
    args = _Args(num_tokens=T, logits_dtype=0 if router_logits.dtype == torch.float32 else 1,
                 hidden=_ptr(hidden), router_logits=_ptr(router_logits), score_bias=_ptr(score_bias),
                 w13=_ptr(w13), w13_scales=_ptr(w13_scales), w13_expert_scale=_ptr(w13_expert_scale),
                 b13=_ptr(b13), w2=_ptr(w2), w2_scales=_ptr(w2_scales), w2_expert_scale=_ptr(w2_expert_scale),
                 b2=_ptr(b2), out=_ptr(out), topk_ids=_ptr(ids), topk_weights=_ptr(weights),
                 workspace=_ptr(workspace), workspace_bytes=ws_bytes)
    stream = torch.cuda.current_stream(dev).cuda_stream
    rc = lib.dll.moegen_forward(ctypes.byref(args), gemm1_kernel, gemm2_kernel, ctypes.c_void_p(stream))
    if rc != 0:
        raise RuntimeError(f"moegen ({lib.path.name}): {lib.dll.moegen_last_error().decode()}")
    return out, ids, weights


@moe_forward.register_fake
def _(handle, hidden, router_logits, score_bias, w13, w13_scales, w13_expert_scale, b13, w2, w2_scales,
      w2_expert_scale, b2, top_k, gemm1_kernel, gemm2_kernel, poison=False):
    T, H = hidden.shape
    return (hidden.new_empty((T, H)), hidden.new_empty((T, top_k), dtype=torch.int32),
            hidden.new_empty((T, top_k), dtype=torch.float32))


@dataclass(frozen=True)
class MoeOutput:
    out: torch.Tensor  # bf16 [T, hidden]
    topk_ids: torch.Tensor  # int32 [T, top_k] global expert ids
    topk_weights: torch.Tensor  # float32 [T, top_k]


class MoeLayer:
    """A loaded moegen build: call it with hidden states, router logits and prepared weights."""

    def __init__(self, out_dir: Path, manifest: dict, spec: ModelSpec, library: Library, gpu: GpuInfo):
        self.out_dir, self.manifest, self.spec, self.library, self.gpu = out_dir, manifest, spec, library, gpu
        names = library.kernel_names()
        self.kernels: list[KernelConfig] = [parse_kernel_name(n) for n in names]
        self.dispatch, self.dispatch_note = load_dispatch(out_dir, gpu, manifest["fingerprint"], names)

    def choose_kernels(self, num_tokens: int) -> tuple[int, int]:
        """(gemm1, gemm2) kernel indices: from this GPU's tuned dispatch table, else the documented
        heuristic (moegen.tune.heuristic_choice) with a one-time warning."""
        if self.dispatch is not None:
            return self.dispatch.choose(num_tokens)
        warn_once(self.dispatch_note)
        return heuristic_choice(self.kernels, self.spec, num_tokens)

    def check_inputs(self, hidden, router_logits, weights: PreparedWeights, score_bias) -> None:
        s = self.spec
        if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2:
            raise ValueError(f"hidden_states: expected a 2-D tensor [T, {s.hidden_size}]")
        dev = hidden.device
        if dev.type != "cuda":
            raise ValueError(f"hidden_states: on {dev}, expected a CUDA device")
        T = hidden.shape[0]
        _check_tensor("hidden_states", hidden, (T, s.hidden_size), (torch.bfloat16,), dev)
        _check_tensor("router_logits", router_logits, (T, s.num_experts), (torch.float32, torch.bfloat16), dev)
        if s.router.score_bias:
            if score_bias is None:
                raise ValueError(f"score_bias: required by {s.name} (per-expert selection bias), got None")
            _check_tensor("score_bias", score_bias, (s.num_experts,), (torch.float32,), dev)
        elif score_bias is not None:
            raise ValueError(f"score_bias: {s.name}'s router takes no score bias")
        E = s.local_experts
        for gname, g, n, k in (("gemm1", weights.gemm1, 2 * s.local_intermediate, s.hidden_size),
                               ("gemm2", weights.gemm2, s.hidden_size, s.local_intermediate)):
            n64, k64 = -(-n // 128) * 2, -(-k // 64)
            _check_tensor(f"weights.{gname}.w", g.w, (E, n64, k64, 2048), (torch.uint8,), dev)
            _check_tensor(f"weights.{gname}.scales", g.scales, (E, n64, k64, 128), (torch.uint8,), dev)
            _check_tensor(f"weights.{gname}.expert_scale", g.expert_scale, (E,), (torch.float32,), dev)
            has_bias = s.gemm1_bias if gname == "gemm1" else s.gemm2_bias
            if has_bias:
                if g.bias is None:
                    raise ValueError(f"weights.{gname}.bias: required by {s.name}")
                _check_tensor(f"weights.{gname}.bias", g.bias, (E, n), (torch.float32,), dev)
            elif g.bias is not None:
                raise ValueError(f"weights.{gname}.bias: {s.name} has no {gname} bias")

    def __call__(self, hidden_states: torch.Tensor, router_logits: torch.Tensor, weights: PreparedWeights,
                 score_bias: torch.Tensor | None = None, kernels: tuple[int, int] | None = None,
                 poison: bool = False) -> MoeOutput:
        self.check_inputs(hidden_states, router_logits, weights, score_bias)
        k1, k2 = kernels if kernels is not None else self.choose_kernels(hidden_states.shape[0])
        g1, g2 = weights.gemm1, weights.gemm2
        out, ids, w = torch.ops.moegen.moe_forward(
            self.library.handle, hidden_states, router_logits, score_bias, g1.w, g1.scales, g1.expert_scale, g1.bias,
            g2.w, g2.scales, g2.expert_scale, g2.bias, self.spec.top_k, k1, k2, poison)
        return MoeOutput(out, ids, w)


def load(out_dir: str | Path, spec: ModelSpec | None = None, device: torch.device | str | None = None) -> MoeLayer:
    """Load ``generated/<variant>/<arch>``; checks manifest, library, spec and GPU before use."""
    out_dir = Path(out_dir)
    mpath = out_dir / "manifest.json"
    try:
        manifest = json.loads(mpath.read_text())
    except FileNotFoundError:
        raise LoadError(f"{mpath}: no manifest; run `moegen build` first") from None
    except ValueError as e:
        raise LoadError(f"{mpath}: not valid JSON ({e})") from None
    if manifest.get("schema") != MANIFEST_SCHEMA:
        raise LoadError(f"{mpath}: schema {manifest.get('schema')!r}, expected {MANIFEST_SCHEMA}; rebuild")
    lib_path = out_dir / manifest["library"]
    if not lib_path.exists():
        raise LoadError(f"{lib_path}: library named by the manifest is missing; rebuild")
    if file_sha256(lib_path) != manifest.get("library_sha256"):
        raise LoadError(f"{lib_path}: stale library (its sha256 differs from the manifest's); rebuild")
    built_spec = model_from_dict(_spec_to_yaml_dict(manifest["spec"]), f"{mpath}:spec")
    if spec is not None and spec.to_dict() != manifest["spec"]:
        want, have = spec.to_dict(), manifest["spec"]
        diff = next(k for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k))
        raise LoadError(f"{mpath}: built for {manifest['variant']}, but the spec given differs at "
                        f"'{diff}': built {have.get(diff)!r}, given {want.get(diff)!r}; rebuild for this spec")
    arch = manifest["arch"]
    if arch not in ARCH_CAPABILITY:
        raise LoadError(f"{mpath}: arch {arch!r} has no runtime support")
    if not torch.cuda.is_available():
        raise LoadError("no CUDA GPU visible to PyTorch; moegen layers run on the GPU")
    dev = torch.device(device if device is not None else "cuda")
    cap = torch.cuda.get_device_capability(dev)
    if cap != ARCH_CAPABILITY[arch]:
        raise LoadError(f"{mpath}: built for {arch} (compute capability {ARCH_CAPABILITY[arch]}), but "
                        f"{torch.cuda.get_device_name(dev)} is {cap}; build with the matching --arch")
    library = Library(lib_path)
    info = library.build_info()
    if info.get("fingerprint") != manifest["fingerprint"] or library.dll.moegen_abi_version() != ABI_VERSION:
        raise LoadError(f"{lib_path}: library fingerprint/ABI does not match {mpath}; rebuild")
    return MoeLayer(out_dir, manifest, built_spec, library, gpu_info(dev))


def gpu_info(device: torch.device | str = "cuda") -> GpuInfo:
    """What a dispatch table is keyed by: GPU name, SM count, driver and CUDA versions."""
    props = torch.cuda.get_device_properties(device)
    return GpuInfo(name=props.name, sm_count=props.multi_processor_count, driver=_driver_version(),
                   cuda=str(torch.version.cuda))


def _driver_version() -> str:
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


def _spec_to_yaml_dict(d: dict) -> dict:
    """ModelSpec.to_dict() output -> the YAML schema that model_from_dict reads."""
    return {"name": d["name"], "num_experts": d["num_experts"], "hidden_size": d["hidden_size"],
            "intermediate_size": d["intermediate_size"], "router": d["router"], "activation": d["activation"],
            "bias": {"gemm1": d["gemm1_bias"], "gemm2": d["gemm2_bias"]}, "parallel": d["parallel"]}
