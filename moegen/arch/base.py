"""What every arch module provides: its config space as data (axes, rules with one-line hardware
reasons, fallback defaults), its resource model, its build flags and the weight layout it consumes."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable

from ..naming import GEMMS, KernelConfig
from ..problem import GemmShape, gemm_shapes
from ..spec import ModelSpec

# (reason, predicate): a config is valid for a GEMM shape when every predicate holds.
Rule = tuple[str, Callable[[KernelConfig, GemmShape], bool]]


@dataclass(frozen=True)
class ArchPolicy:
    name: str  # "sm90"
    gencode: str  # nvcc's -gencode for the arch-specific target
    compute_capability: tuple[int, int]  # the only one its code runs on
    weight_layout: str  # moegen.layout name of the prepared weights its kernels read
    activation_format: str  # the GEMMs' activation operand ("bf16", "fp8", "mxfp8")
    axes: dict  # KernelConfig field -> allowed values
    rules: tuple[Rule, ...]
    # Per regime (decode, mid, prefill) an ordered list of (block_m, block_n, block_k, stages): the first
    # valid one per GEMM is built when no shipped dispatch table covers the problem.
    fallback: dict
    # KernelConfig -> the template's resource parameters (CTAs per SM, register split)
    launch_resources: Callable[[KernelConfig], dict]
    gemm_template: str  # the GEMM kernel's translation unit (templates/)
    launch_fn: str  # the C++ function type of the `<kernel>_launch` functions the GEMM units export
    # (block_m, block_n, block_k, stages[, tile_loop]) worth timing first: `moegen tune --kernels shortlist` times the
    # valid ones, a fraction of the space, for GPUs and problems without a table of their own.
    shortlist: tuple = ()
    # (KernelConfig, its GemmShape or None) -> why ptxas serializes its wgmmas (measured), or None:
    # build and sass logs say whether a serialized kernel was expected.
    wgmma_serialization: Callable[[KernelConfig, "GemmShape | None"], str | None] = lambda c, shape=None: None
    # KernelConfig -> whether the kernel carries the per-expert progress code (GEMM2 starts on an
    # expert's rows as they land); the layer follows per expert only when both of its kernels do.
    expert_progress: Callable[[KernelConfig], bool] = lambda c: False
    # (KernelConfig, GemmShape) -> whether the kernel loops over tiles on a persistent grid
    persistent_tile_loop: Callable[[KernelConfig, "GemmShape"], bool] = lambda c, shape: False

    def __post_init__(self):  # frozen all the way down: a policy is shared by every build in the process
        object.__setattr__(self, "axes", MappingProxyType({k: tuple(v) for k, v in self.axes.items()}))
        object.__setattr__(self, "fallback", MappingProxyType({k: tuple(map(tuple, v)) for k, v in self.fallback.items()}))
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "shortlist", tuple(map(tuple, self.shortlist)))

    def __deepcopy__(self, memo):  # immutable: a copy is the policy itself
        return self

    @property
    def fp8(self) -> bool:
        """Whether its kernels are the e4m3-activation (W4A8) family (KernelConfig.fp8)."""
        return self.activation_format == "fp8"

    def config(self, gemm: str, block_m: int, block_n: int, block_k: int, stages: int,
               tile_loop: bool = False) -> KernelConfig:
        return KernelConfig(self.name, gemm, block_m, block_n, block_k, stages, fp8=self.fp8, tile_loop=tile_loop)

    def rejection_reason(self, c: KernelConfig, shape: GemmShape) -> str | None:
        if c.fp8 != self.fp8:
            return f"{'e4m3' if c.fp8 else 'bf16'} activations, but this build's are {self.activation_format}"
        for field, allowed in self.axes.items():
            if getattr(c, field) not in allowed:
                return f"{field} = {getattr(c, field)} is not on the {self.name} axis {allowed}"
        for reason, ok in self.rules:
            if not ok(c, shape):
                return reason
        return None

    def candidate_configs(self, spec: ModelSpec) -> list[KernelConfig]:
        """Every valid config of both GEMMs for this spec: the space `moegen tune` searches."""
        out = []
        for gemm, shape in gemm_shapes(spec).items():
            for values in itertools.product(*self.axes.values()):
                c = self.config(gemm, **dict(zip(self.axes, values)))
                if self.rejection_reason(c, shape) is None:
                    out.append(c)
        return out

    def fallback_configs(self, spec: ModelSpec) -> list[KernelConfig]:
        """Per GEMM, a decode, a mid-batch and a prefill kernel (the first valid of each regime's list)."""
        out = []
        for gemm, shape in gemm_shapes(spec).items():
            for regime, choices in self.fallback.items():
                for m, n, k, s in choices:
                    c = self.config(gemm, m, n, k, s)
                    reason = self.rejection_reason(c, shape)
                    if reason is None:
                        if c not in out:
                            out.append(c)
                        break
                else:
                    raise ValueError(f"{spec.source}: no {regime} {gemm} kernel of {self.name} fits this layer "
                                     f"({gemm} N={shape.n}, K={shape.k}; the last tried, {c.name}: {reason}); "
                                     "expected a larger hidden_size or intermediate_size, or --kernels naming "
                                     "kernels that fit (`--kernels all` builds every one that does)")
        return out

    def shortlist_configs(self, spec: ModelSpec) -> list[KernelConfig]:
        out = []
        for gemm, shape in gemm_shapes(spec).items():
            for tile in self.shortlist:
                c = self.config(gemm, *tile)
                if self.rejection_reason(c, shape) is None:
                    out.append(c)
        return out

    def check_configs(self, spec: ModelSpec, configs: list[KernelConfig]) -> None:
        """ValueError naming the first config that is not a valid kernel of this arch for spec."""
        shapes = gemm_shapes(spec)
        for c in configs:
            if c.arch != self.name or c.gemm not in GEMMS:
                raise ValueError(f"kernel config {c.name}: not an {self.name} kernel (gemm1/gemm2 of {self.name})")
            reason = self.rejection_reason(c, shapes[c.gemm])
            if reason:
                raise ValueError(f"kernel config {c.name}: invalid for {spec.variant}: {reason}")
