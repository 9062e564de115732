"""SM100 (Blackwell: B200, GB200): CUTLASS 4.2's block-scaled pointer-array grouped GEMM
(templates/include/moegen/sm100/), MXFP4 weights x MXFP8 activations (BF16 is not a block-scaled
operand, so the layer quantizes its activations: moegen.mxfp8).  Compile-verified: no SM100 GPU
has run these kernels yet (`moegen check` on one is the test).

A config's block_m is the tile's weight rows (128 on one SM, 256 on a 2-SM pair: tcgen05's MMA M),
block_n its token rows (the MMA N), block_k its K; stages 0 means CUTLASS's builder sizes the ring
from the shared memory left after the epilogue (StageCountAutoCarveout).
"""
from __future__ import annotations

from types import MappingProxyType

from ..layout import SM100_BLOCK_SCALED
from ..naming import KernelConfig
from .base import ArchPolicy, Rule

LAYOUT = SM100_BLOCK_SCALED
SMEM_LIMIT = 227 * 1024


def stage_bytes(c: KernelConfig) -> int:
    """One pipeline stage per CTA: the weights' tile (FP4 is unpacked to a byte per value in shared
    memory for kind::mxf8f6f4), the tokens' tile (e4m3) and both tiles' scales."""
    rows_per_cta = 128  # a 2-SM tile splits its 256 weight rows over the pair
    return rows_per_cta * c.block_k + c.block_n * c.block_k + (rows_per_cta + c.block_n) * c.block_k // 32


AXES = MappingProxyType({"block_m": (128, 256), "block_n": (64, 128, 256), "block_k": (128, 256), "stages": (0,),
                         "tile_loop": (False,)})

RULES: tuple[Rule, ...] = (
    ("block_k beyond the 128-padded K only loads zeros", lambda c, s: c.block_k <= LAYOUT.padded(0, s.k)[1]),
    ("the builder needs at least three stages of the ring in 227 KiB with the epilogue's carve-out (~32 KiB)",
     lambda c, s: 3 * stage_bytes(c) <= SMEM_LIMIT - 32 * 1024),
    ("a 2-SM tile pays for its cluster only with enough token rows to share the weights' loads (block_n >= 128)",
     lambda c, s: c.block_m == 128 or c.block_n >= 128),
)

FALLBACK = MappingProxyType({
    "decode": [(128, 64, 128, 0)],
    "mid": [(128, 128, 128, 0)],
    "prefill": [(256, 256, 128, 0), (256, 128, 128, 0)],
})
SHORTLIST = ((128, 64, 128, 0), (128, 64, 256, 0), (128, 128, 128, 0), (256, 128, 128, 0), (256, 256, 128, 0))

SM100 = ArchPolicy(name="sm100", gencode="-gencode=arch=compute_100a,code=sm_100a", compute_capability=(10, 0),
                   weight_layout=LAYOUT.name, activation_format="mxfp8", axes=AXES, rules=RULES, fallback=FALLBACK,
                   launch_resources=lambda c: {}, gemm_template="sm100_gemm_kernel.cu.j2",
                   launch_fn="moegen::sm100::GemmLaunchFn", shortlist=SHORTLIST)
