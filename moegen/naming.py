"""Canonical kernel names: unique per config, parseable back into the config they name.

    moegen_sm90_gemm1_m64n16k128s6  ->  KernelConfig(arch="sm90", gemm="gemm1", block_m=64, block_n=16,
                                                     block_k=128, stages=6)
"""
from __future__ import annotations

import re

from .config_space import KernelConfig

_NAME = re.compile(r"moegen_(?P<arch>sm[1-9]\d*)_(?P<gemm>gemm[12])_m(?P<m>[1-9]\d*)n(?P<n>[1-9]\d*)"
                   r"k(?P<k>[1-9]\d*)s(?P<s>[1-9]\d*)")


def kernel_name(cfg: KernelConfig) -> str:
    return f"moegen_{cfg.arch}_{cfg.gemm}_m{cfg.block_m}n{cfg.block_n}k{cfg.block_k}s{cfg.stages}"


def parse_kernel_name(name: str) -> KernelConfig:
    m = _NAME.fullmatch(name)
    if not m:
        raise ValueError(f"kernel name {name!r}: expected the form moegen_<arch>_<gemm1|gemm2>_m<M>n<N>k<K>s<stages>")
    return KernelConfig(arch=m["arch"], gemm=m["gemm"], block_m=int(m["m"]), block_n=int(m["n"]),
                        block_k=int(m["k"]), stages=int(m["s"]))
