"""Kernel configs and their canonical names: unique per config, parseable back into the config.

    moegen_sm90_gemm1_m64n16k128s6  <->  KernelConfig(arch="sm90", gemm="gemm1", block_m=64, block_n=16,
                                                      block_k=128, stages=6)
    moegen_sm90_gemm1_m64n16k128s6_fp8: the same tile with e4m3 activations (W4A8, fp8=True)
    moegen_sm90_gemm2_m128n128k128s4_loop_fp8: with the full-width tile loop (tile_loop=True)

A KernelConfig is the chosen implementation; the problem (moegen.problem) is what it solves.  They
stay separate: one config serves any model whose shapes it fits.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .spec import shown

GEMMS = ("gemm1", "gemm2")  # gemm1: W1|W3 + SwiGLU; gemm2: W2 + routing weight


@dataclass(frozen=True, order=True)
class KernelConfig:
    arch: str
    gemm: str
    block_m: int  # weight rows per CTA
    block_n: int  # token rows per CTA
    block_k: int
    stages: int  # depth of the shared-memory ring (0: chosen by the arch's builder, SM100)
    fp8: bool = False  # e4m3 activation operand (SM90 W4A8) instead of the arch's default
    # A persistent grid's tile loop over a long K loop, every tile at the full wgmma width (SM90 W4A8);
    # short K loops get the loop from the arch's rule without it (moegen.arch.sm90.persistent_tile_loop).
    tile_loop: bool = False

    @property
    def name(self) -> str:
        return kernel_name(self)


_NAME = re.compile(r"moegen_(?P<arch>sm[1-9]\d*)_(?P<gemm>gemm[12])_m(?P<m>[1-9]\d{0,3})n(?P<n>[1-9]\d{0,3})"
                   r"k(?P<k>[1-9]\d{0,3})s(?P<s>0|[1-9]\d?)(?P<loop>_loop)?(?P<fp8>_fp8)?")


def kernel_name(cfg: KernelConfig) -> str:
    suffix = ("_loop" if cfg.tile_loop else "") + ("_fp8" if cfg.fp8 else "")
    return f"moegen_{cfg.arch}_{cfg.gemm}_m{cfg.block_m}n{cfg.block_n}k{cfg.block_k}s{cfg.stages}{suffix}"


def parse_kernel_name(name: str) -> KernelConfig:
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if not m:
        raise ValueError(f"kernel name {shown(name)}: expected the form moegen_<arch>_<gemm1|gemm2>_m<M>n<N>k<K>s<stages>[_loop][_fp8]")
    return KernelConfig(arch=m["arch"], gemm=m["gemm"], block_m=int(m["m"]), block_n=int(m["n"]),
                        block_k=int(m["k"]), stages=int(m["s"]), fp8=bool(m["fp8"]), tile_loop=bool(m["loop"]))
