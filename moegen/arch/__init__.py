"""Per-arch policy as data: one module per architecture, each an ArchPolicy (its config space, rules
with their hardware reasons, defaults, resource model, build flags and the weight layout it consumes)."""
from __future__ import annotations

from ..naming import parse_kernel_name
from .base import ArchPolicy, Rule
from .sm90 import SM90, SM90_FP8
from .sm100 import SM100

ARCHS: dict[str, ArchPolicy] = {SM90.name: SM90, SM100.name: SM100}
# Opt-in activation precisions per arch (ModelSpec.activations), besides "bf16" (the arch's default).
FP8_POLICIES: dict[str, ArchPolicy] = {SM90.name: SM90_FP8}


def get_arch(name: str, activations: str = "bf16") -> ArchPolicy:
    """The policy building `name` kernels for a spec's activations ("bf16": the arch's default, which
    on sm100 quantizes to MXFP8; "fp8": W4A8, sm90 only)."""
    if name not in ARCHS:
        raise ValueError(f"arch {name!r}: expected one of {', '.join(ARCHS)}")
    if activations == "fp8":
        if name not in FP8_POLICIES:
            raise ValueError(f"activations 'fp8' (W4A8) on {name}: expected arch {' or '.join(FP8_POLICIES)}, "
                             f"or activations 'bf16' ({name} runs {ARCHS[name].activation_format})")
        return FP8_POLICIES[name]
    if activations != "bf16":
        raise ValueError(f"activations {activations!r}: expected 'bf16' or 'fp8'")
    return ARCHS[name]


def policy_of(cfg) -> ArchPolicy:
    """The policy a KernelConfig belongs to."""
    return get_arch(cfg.arch, "fp8" if cfg.fp8 else "bf16")


def serialization_note(kernel: str, shapes: dict | None = None) -> str:
    """What the kernel's arch records about ptxas serializing its wgmmas (ArchPolicy.wgmma_serialization);
    shapes: the layer's GEMM shapes (moegen.problem.gemm_shapes), which tell whether a tile loop exists."""
    try:
        cfg = parse_kernel_name(kernel)
    except ValueError:
        return "not a GEMM kernel"
    reason = policy_of(cfg).wgmma_serialization(cfg, (shapes or {}).get(cfg.gemm))
    return f"expected: {reason}" if reason else f"NOT EXPECTED by the {cfg.arch} config space"


__all__ = ["ARCHS", "ArchPolicy", "Rule", "get_arch", "policy_of", "serialization_note"]
