"""Per-arch policy as data: one module per architecture, each an ArchPolicy (its config space, rules
with their hardware reasons, defaults, resource model, build flags and the weight layout it consumes)."""
from __future__ import annotations

from ..naming import parse_kernel_name
from .base import ArchPolicy, Rule
from .sm90 import SM90
from .sm100 import SM100

ARCHS: dict[str, ArchPolicy] = {SM90.name: SM90, SM100.name: SM100}


def get_arch(name: str) -> ArchPolicy:
    if name not in ARCHS:
        raise ValueError(f"arch {name!r}: expected one of {', '.join(ARCHS)}")
    return ARCHS[name]


def serialization_note(kernel: str, shapes: dict | None = None) -> str:
    """What the kernel's arch records about ptxas serializing its wgmmas (ArchPolicy.wgmma_serialization);
    shapes: the layer's GEMM shapes (moegen.problem.gemm_shapes), which tell whether a tile loop exists."""
    try:
        cfg = parse_kernel_name(kernel)
    except ValueError:
        return "not a GEMM kernel"
    reason = get_arch(cfg.arch).wgmma_serialization(cfg, (shapes or {}).get(cfg.gemm))
    return f"expected: {reason}" if reason else f"NOT EXPECTED by the {cfg.arch} config space"


__all__ = ["ARCHS", "ArchPolicy", "Rule", "get_arch", "serialization_note"]
