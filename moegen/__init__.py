"""moegen: an ahead-of-time compiler for MXFP4 Mixture-of-Experts layers (CUTLASS/CuTe kernels)."""
from .spec import ModelSpec, SpecError, load_model

__all__ = ["ModelSpec", "SpecError", "load_model", "load", "prepare"]


def load(*args, **kwargs):
    """See moegen.runtime.load (imported lazily: building needs no torch CUDA)."""
    from .runtime import load as _load
    return _load(*args, **kwargs)


def prepare(*args, **kwargs):
    """See moegen.prepare.prepare."""
    from .prepare import prepare as _prepare
    return _prepare(*args, **kwargs)
