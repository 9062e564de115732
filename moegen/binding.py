"""ctypes binding of a moegen library's C ABI (templates/include/moegen/abi.h).

The structs below mirror abi.h; at load, the library reports each struct's size and field offsets as
its compiler laid them out (moegen_struct_layout), and a mismatch is a load error, not a wrong call.
"""
from __future__ import annotations

import ctypes
import json
import threading
from pathlib import Path

from .artifact import ABI_VERSION, ArtifactError

LOGITS_F32, LOGITS_BF16 = 0, 1
IDS_I32, IDS_I64 = 0, 1


class Weights(ctypes.Structure):
    _fields_ = [("w13", ctypes.c_void_p), ("w13_scales", ctypes.c_void_p), ("w13_expert_scale", ctypes.c_void_p),
                ("b13", ctypes.c_void_p), ("w2", ctypes.c_void_p), ("w2_scales", ctypes.c_void_p),
                ("w2_expert_scale", ctypes.c_void_p), ("b2", ctypes.c_void_p)]


class Args(ctypes.Structure):
    _fields_ = [("num_tokens", ctypes.c_int64), ("logits_dtype", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("hidden", ctypes.c_void_p), ("router_logits", ctypes.c_void_p), ("score_bias", ctypes.c_void_p),
                ("weights", Weights), ("out", ctypes.c_void_p), ("topk_ids", ctypes.c_void_p),
                ("topk_weights", ctypes.c_void_p), ("workspace", ctypes.c_void_p),
                ("workspace_bytes", ctypes.c_size_t)]


class ExpertsArgs(ctypes.Structure):
    _fields_ = [("num_tokens", ctypes.c_int64), ("ids_dtype", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("hidden", ctypes.c_void_p), ("topk_ids", ctypes.c_void_p), ("topk_weights", ctypes.c_void_p),
                ("expert_map", ctypes.c_void_p), ("weights", Weights), ("out", ctypes.c_void_p),
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t)]


class BatchedArgs(ctypes.Structure):
    _fields_ = [("num_tokens", ctypes.c_int64), ("max_tokens_per_expert", ctypes.c_int64), ("hidden", ctypes.c_void_p),
                ("expert_num_tokens", ctypes.c_void_p), ("weights", Weights), ("out", ctypes.c_void_p),
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t)]


STRUCTS = {"moegen_weights": Weights, "moegen_args": Args, "moegen_experts_args": ExpertsArgs,
           "moegen_batched_args": BatchedArgs}


def ctypes_layout(struct: type[ctypes.Structure]) -> str:
    """The layout string moegen_struct_layout reports, computed from the ctypes mirror."""
    return f"{ctypes.sizeof(struct)};" + "".join(f"{name}@{getattr(struct, name).offset}," for name, _ in struct._fields_)


_LIBS: dict[int, "Library"] = {}
_LIBS_LOCK = threading.Lock()


def library(handle: int) -> "Library":
    try:
        return _LIBS[handle]
    except (KeyError, TypeError):
        raise ValueError(f"handle {handle!r}: not a loaded moegen library (use moegen.load)") from None


class Library:
    """One loaded .so; `handle` is how the custom ops name it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.dll = ctypes.CDLL(str(path))
        except OSError as e:
            raise ArtifactError(f"{path}: cannot load the library: {e}") from None
        d = self.dll
        try:
            d.moegen_abi_version.restype = ctypes.c_int
            abi = d.moegen_abi_version()
        except AttributeError:
            raise ArtifactError(f"{path}: not a moegen library (no moegen_abi_version)") from None
        if abi != ABI_VERSION:
            raise ArtifactError(f"{path}: C ABI version {abi}, this moegen speaks {ABI_VERSION}; rebuild")
        d.moegen_forward.argtypes = [ctypes.POINTER(Args), ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        d.moegen_forward.restype = ctypes.c_int
        d.moegen_forward_experts.argtypes = [ctypes.POINTER(ExpertsArgs), ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        d.moegen_forward_experts.restype = ctypes.c_int
        d.moegen_forward_batched.argtypes = [ctypes.POINTER(BatchedArgs), ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        d.moegen_forward_batched.restype = ctypes.c_int
        d.moegen_workspace_bytes.argtypes = [ctypes.c_int64]
        d.moegen_workspace_bytes.restype = ctypes.c_size_t
        d.moegen_workspace_bytes_batched.argtypes = [ctypes.c_int64, ctypes.c_int64]
        d.moegen_workspace_bytes_batched.restype = ctypes.c_size_t
        d.moegen_max_tokens.restype = ctypes.c_int64
        d.moegen_max_tokens_per_expert.restype = ctypes.c_int64
        d.moegen_last_error.restype = ctypes.c_char_p
        d.moegen_build_info.restype = ctypes.c_char_p
        d.moegen_num_kernels.restype = ctypes.c_int
        d.moegen_kernel_name.argtypes = [ctypes.c_int]
        d.moegen_kernel_name.restype = ctypes.c_char_p
        d.moegen_struct_layout.argtypes = [ctypes.c_char_p]
        d.moegen_struct_layout.restype = ctypes.c_char_p
        for name, struct in STRUCTS.items():
            reported = (d.moegen_struct_layout(name.encode()) or b"").decode()
            if reported != ctypes_layout(struct):
                raise ArtifactError(f"{path}: struct {name} is laid out as {reported!r} in the library but "
                                    f"{ctypes_layout(struct)!r} in moegen.binding; they must match (abi.h)")
        self.max_tokens = int(d.moegen_max_tokens())
        self.max_tokens_per_expert = int(d.moegen_max_tokens_per_expert())  # 0: no batched calls
        with _LIBS_LOCK:
            self.handle = len(_LIBS)
            _LIBS[self.handle] = self

    def build_info(self) -> dict:
        return json.loads(self.dll.moegen_build_info().decode())

    def kernel_names(self) -> list[str]:
        return [self.dll.moegen_kernel_name(i).decode() for i in range(self.dll.moegen_num_kernels())]

    def workspace_bytes(self, num_tokens: int) -> int:
        return int(self.dll.moegen_workspace_bytes(num_tokens))

    def workspace_bytes_batched(self, num_tokens: int, max_tokens_per_expert: int) -> int:
        return int(self.dll.moegen_workspace_bytes_batched(num_tokens, max_tokens_per_expert))

    def last_error(self) -> str:
        return self.dll.moegen_last_error().decode(errors="replace")
