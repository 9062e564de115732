"""moegen: an ahead-of-time compiler for MXFP4 Mixture-of-Experts layers (CUTLASS/CuTe kernels)."""
from .spec import ModelSpec, SpecError, load_model

__all__ = ["ModelSpec", "SpecError", "load_model", "load", "prepare"]


def load(*args, **kwargs):
    """See moegen.runtime.load (imported lazily: building needs no torch CUDA)."""
    from .runtime import load as _load
    return _load(*args, **kwargs)


def __getattr__(name: str):
    """moegen.checkpoint, .routing, .distributed, ... without importing torch at `import moegen`."""
    import importlib
    if name in ("checkpoint", "routing", "distributed", "runtime", "reference", "mxfp4", "hf_config"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'moegen' has no attribute {name!r}")


def prepare(*args, **kwargs):
    """See moegen.prepare.prepare."""
    from .prepare import prepare as _prepare
    return _prepare(*args, **kwargs)
