"""Per-arch policy as data: one module per architecture, each an ArchPolicy (its config space, rules
with their hardware reasons, defaults, resource model, build flags and the weight layout it consumes)."""
from __future__ import annotations

from .base import ArchPolicy, Rule
from .sm90 import SM90
from .sm100 import SM100

ARCHS: dict[str, ArchPolicy] = {SM90.name: SM90, SM100.name: SM100}


def get_arch(name: str) -> ArchPolicy:
    if name not in ARCHS:
        raise ValueError(f"arch {name!r}: expected one of {', '.join(ARCHS)}")
    return ARCHS[name]


__all__ = ["ARCHS", "ArchPolicy", "Rule", "get_arch"]
