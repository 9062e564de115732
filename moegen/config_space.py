"""Kernel config space per arch: tile shapes as data, each pruning rule one line with its reason.

A KernelConfig is the *chosen* implementation; the ModelSpec is the *problem*.  They stay separate
(the same config can serve any model whose padded sizes it fits).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

from .spec import ModelSpec

ATOM_K = 64  # prepared weights come in 64-row x 64-K atoms (templates/include/moegen/sm90_mxfp4_grouped_gemm.cuh)
ROW_PAD = 128  # prepared weight rows are padded to this (moegen.prepare)


@dataclass(frozen=True, order=True)
class KernelConfig:
    arch: str
    gemm: str  # "gemm1" (W1|W3 + SwiGLU) or "gemm2" (W2 + routing weight)
    block_m: int  # weight rows per CTA: 64-row slices over one or two consumer warpgroups
    block_n: int  # token rows per CTA (the wgmma N)
    block_k: int
    stages: int  # depth of the shared-memory ring the producer warp fills

    @property
    def name(self) -> str:
        from .naming import kernel_name
        return kernel_name(self)


@dataclass(frozen=True)
class GemmShape:
    """The N (output rows) and K of one of the layer's two grouped GEMMs."""
    n: int
    k: int

    @property
    def k_padded(self) -> int:
        return -(-self.k // ATOM_K) * ATOM_K

    @property
    def n_padded(self) -> int:
        return -(-self.n // ROW_PAD) * ROW_PAD


def gemm_shapes(spec: ModelSpec) -> dict[str, GemmShape]:
    return {"gemm1": GemmShape(2 * spec.local_intermediate, spec.hidden_size),
            "gemm2": GemmShape(spec.hidden_size, spec.local_intermediate)}


def smem_bytes(c: KernelConfig) -> int:
    b = c.block_n * c.block_k * 2 * c.stages  # bf16 activation tiles
    a = (c.block_m // 64) * (c.block_k // 64) * (2048 + 128) * c.stages  # e2m1 atoms + e8m0 scales
    barriers = 16 * c.stages  # full + empty mbarrier per slot
    row_factors = 2 * c.block_n * 4 if c.gemm == "gemm2" else 4  # routing weights, double-buffered
    return b + a + barriers + row_factors + 1024  # + alignment of the swizzled B tile


def slices_per_consumer(c: KernelConfig) -> int:
    slices = c.block_m // 64  # 64-row weight slices, over at most two consumer warpgroups
    return slices // min(slices, 2)


def accumulator_registers(c: KernelConfig) -> int:
    return slices_per_consumer(c) * c.block_n // 2  # 64 x block_n fp32 accumulators per slice, 128 threads


def a_fragment_registers(c: KernelConfig) -> int:
    return slices_per_consumer(c) * 2 * (c.block_k // 16) * 4  # double-buffered bf16x2 A fragments per slice


def consumer_register_need(c: KernelConfig) -> int:
    """A consumer thread's accumulators + double-buffered A fragments + ~30 (the templates' kConsumerNeed)."""
    return accumulator_registers(c) + a_fragment_registers(c) + 30


def two_ctas_per_sm(c: KernelConfig) -> bool:
    """Two consumer warpgroups within 104 registers run two CTAs per SM (the templates' kTwoCtasPerSm)."""
    return c.block_m > 64 and consumer_register_need(c) <= 104


# --- SM90 ------------------------------------------------------------------------------------
SM90_BLOCK_M = (64, 128, 256)
SM90_BLOCK_N = (8, 16, 32, 64, 128, 256)
SM90_BLOCK_K = (64, 128)
# No 12: the K loop unrolls over the ring (compile-time slots), and 12-deep rings never won a bucket
# of the H200 tuner at 6c6809b (s4-s8 did).
SM90_STAGES = (3, 4, 6, 8)
SM90_SMEM_LIMIT = 227 * 1024

Rule = tuple[str, Callable[[KernelConfig, GemmShape], bool]]
SM90_RULES: list[Rule] = [
    ("block_k must divide the 64-padded K: prepared atoms end there", lambda c, s: s.k_padded % c.block_k == 0),
    ("shared memory per CTA is at most 227 KiB on SM90", lambda c, s: smem_bytes(c) <= SM90_SMEM_LIMIT),
    ("consumer accumulators + A fragments must leave registers for the widening (255 per thread with one "
     "consumer warpgroup, 224 after setmaxnreg with two: 192 compiled spill-free at m256n128k64 and m256n64k128), "
     "or ptxas spills",
     lambda c, s: accumulator_registers(c) + a_fragment_registers(c) <= (200 if c.block_m == 64 else 192)),
    ("prefetch distance (stages-2) beyond the K loop only wastes shared memory",
     lambda c, s: c.stages - 2 <= max(1, s.k_padded // c.block_k)),
    ("3 stages leave one slot loading while two feed wgmmas: too little to hide HBM latency unless the K loop "
     "is that short",
     lambda c, s: c.stages > 3 or s.k_padded // c.block_k <= 4),
    ("two consumer warpgroups only pay off once a CTA has enough token rows to share B, or fits twice on an "
     "SM (32 token rows, consumers within 104 registers: templates' kTwoCtasPerSm)",
     lambda c, s: c.block_m == 64 or c.block_n >= 64 or (c.block_n >= 32 and two_ctas_per_sm(c))),
    ("a CTA's weight rows must lie inside the prepared tensor, whose rows are padded to 128",
     lambda c, s: -(-s.n // c.block_m) * c.block_m <= s.n_padded),
]


def rejection_reason(c: KernelConfig, shape: GemmShape, rules: list[Rule] = SM90_RULES) -> str | None:
    for reason, ok in rules:
        if not ok(c, shape):
            return reason
    return None


def candidate_configs(spec: ModelSpec, arch: str) -> list[KernelConfig]:
    """Every valid config of both GEMMs for this spec: the space `moegen tune` searches."""
    if arch != "sm90":
        return []  # SM100 kernels are not written yet; its space lands with them
    out = []
    for gemm, shape in gemm_shapes(spec).items():
        for m, n, k, s in itertools.product(SM90_BLOCK_M, SM90_BLOCK_N, SM90_BLOCK_K, SM90_STAGES):
            c = KernelConfig("sm90", gemm, m, n, k, s)
            if rejection_reason(c, shape) is None:
                out.append(c)
    return out


# Default build, per GEMM: a decode, a mid-batch and a prefill kernel, the first valid of each list
# (the H200 tuner's picks for deepseek-v4-flash at 6c6809b: n8 up to ~64 tokens, n32-n64 around
# 256-1024, m128 n128-n256 from 4096; docs/benchmarks.md).
SM90_DEFAULTS = {
    "decode": [(64, 8, 128, 4), (64, 8, 64, 4), (64, 8, 64, 3)],
    "mid": [(64, 32, 128, 4), (64, 32, 64, 4), (64, 32, 64, 3)],
    "prefill": [(128, 128, 128, 4), (128, 128, 64, 4), (128, 64, 64, 4), (128, 128, 64, 3)],
}


def default_configs(spec: ModelSpec, arch: str) -> list[KernelConfig]:
    if arch != "sm90":
        raise NotImplementedError(f"arch {arch!r}: kernels exist for sm90 only (SM100 kernels come later)")
    out = []
    for gemm, shape in gemm_shapes(spec).items():
        for choices in SM90_DEFAULTS.values():
            for m, n, k, s in choices:
                c = KernelConfig(arch, gemm, m, n, k, s)
                if rejection_reason(c, shape) is None:
                    out.append(c)
                    break
            else:
                raise ValueError(f"{spec.source}: no default {gemm} config fits N={shape.n}, K={shape.k}")
    return out


def check_configs(spec: ModelSpec, configs: list[KernelConfig]) -> None:
    shapes = gemm_shapes(spec)
    for c in configs:
        if c.arch != "sm90" or c.gemm not in shapes:
            raise ValueError(f"kernel config {c.name}: not in the sm90 space (gemm1/gemm2 of sm90)")
        for field, allowed in (("block_m", SM90_BLOCK_M), ("block_n", SM90_BLOCK_N), ("block_k", SM90_BLOCK_K),
                               ("stages", SM90_STAGES)):
            if getattr(c, field) not in allowed:
                raise ValueError(f"kernel config {c.name}: {field} = {getattr(c, field)}, expected one of {allowed}")
        reason = rejection_reason(c, shapes[c.gemm])
        if reason:
            raise ValueError(f"kernel config {c.name}: invalid for {spec.variant}: {reason}")

