"""moegen: an ahead-of-time compiler for MXFP4 Mixture-of-Experts layers (CUTLASS/CuTe kernels).

moegen.load (a built layer), moegen.load_experts (a layer's weights from a model directory) and the
submodules (moegen.prepare.prepare, moegen.routing, moegen.distributed, ...) import torch lazily:
building needs no GPU stack."""
from .spec import ModelSpec, SpecError, load_model

__all__ = ["ModelSpec", "SpecError", "load_model", "load", "load_experts"]

_SUBMODULES = ("checkpoint", "routing", "distributed", "runtime", "reference", "mxfp4", "hf_config", "prepare")


def load(*args, **kwargs):
    """See moegen.runtime.load."""
    from .runtime import load as _load
    return _load(*args, **kwargs)


def load_experts(*args, **kwargs):
    """See moegen.checkpoint.load_experts."""
    from .checkpoint import load_experts as _load_experts
    return _load_experts(*args, **kwargs)


def __getattr__(name: str):
    import importlib
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'moegen' has no attribute {name!r}")
