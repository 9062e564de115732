"""SM90 (Hopper: H100, H200, H20): the warp-specialized MXFP4 x BF16 grouped GEMM of
templates/include/moegen/sm90/, and its W4A8 twin (MXFP4 x per-token e4m3, `SM90_FP8`).  Tile
shapes as data, each pruning rule one line with its reason, the register plan the template compiles
with, and the weight layout the kernels stream.
"""
from __future__ import annotations

from types import MappingProxyType
import dataclasses

from ..layout import SM90_ATOMS, SM90_E4M3_ATOMS
from ..naming import KernelConfig
from ..problem import GemmShape
from .base import ArchPolicy, Rule

LAYOUT = SM90_ATOMS
SMEM_LIMIT = 227 * 1024  # opt-in dynamic shared memory per CTA on every SM90 part
REGISTER_FILE = 65536  # 32-bit registers per SM


def layout_of(c: KernelConfig):
    return SM90_E4M3_ATOMS if c.fp8 else SM90_ATOMS


def activation_bytes(c: KernelConfig) -> int:
    return 1 if c.fp8 else 2


def mma_k(c: KernelConfig) -> int:
    return 32 if c.fp8 else 16  # K of one wgmma: 32 bytes of either operand type


def smem_bytes(c: KernelConfig) -> int:
    b = c.block_n * c.block_k * activation_bytes(c) * c.stages  # bf16 or e4m3 activation tiles
    a = (c.block_m // LAYOUT.atom_rows) * (c.block_k // LAYOUT.atom_k) * \
        (LAYOUT.atom_bytes + LAYOUT.atom_scale_bytes) * c.stages  # e2m1 atoms + e8m0 scales
    barriers = 16 * c.stages  # full + empty mbarrier per slot
    # per-row epilogue factors, double-buffered: routing weights (gemm2), activation scales (fp8)
    factors = (c.gemm == "gemm2") + c.fp8
    row_factors = 2 * factors * c.block_n * 4 if factors else 4
    return b + a + barriers + row_factors + 1024  # + alignment of the swizzled B tile


# --- resource model: the template compiles with exactly these numbers (launch_resources) ------------
def consumer_warpgroups(c: KernelConfig) -> int:
    return min(c.block_m // 64, 2)  # 64-row weight slices over at most two consumer warpgroups


def slices_per_consumer(c: KernelConfig) -> int:
    return (c.block_m // 64) // consumer_warpgroups(c)


def threads(c: KernelConfig) -> int:
    consumers = consumer_warpgroups(c)
    return 128 * consumers + 32 * (4 if consumers > 1 else 1)  # a producer warpgroup, or one warp


def accumulator_registers(c: KernelConfig) -> int:
    # 64 x block_n fp32 accumulators per slice over 128 threads; fp8 twice: each K tile's partial sums
    # (FP8 wgmma accumulates at reduced precision) are promoted into FP32 ones
    return slices_per_consumer(c) * c.block_n // 2 * (2 if c.fp8 else 1)


def step_k(c: KernelConfig) -> int:
    """K per consumer step (the template's StepK): BF16 tiles with one consumer warpgroup widen and issue
    a 128-deep K tile in two 64-deep steps, halving the A fragments, so more CTAs share an SM at decode
    while the copies stay 128 deep (64-deep K tiles stream slower).  Not where the stepped tile's
    occupancy would serialize its wgmmas (m64n32k128s4, stepped: 7 % behind the best GEMM2 of
    DeepSeek-V4-Flash's T = 1 tune on the H200, where in one step it is the pick)."""
    stepped = not c.fp8 and consumer_warpgroups(c) == 1 and c.block_k == 128
    return 64 if stepped and (c.block_m, c.block_n, 64) not in SERIALIZED_WGMMA_TILES else c.block_k


def a_fragment_registers(c: KernelConfig) -> int:
    return slices_per_consumer(c) * 2 * (step_k(c) // mma_k(c)) * 4  # double-buffered A fragments per slice


def consumer_register_need(c: KernelConfig) -> int:
    """A consumer thread's accumulators + double-buffered A fragments + ~30 for the widening (~40 for
    the e4m3 table widening and the promotion: m64n8k256 fp8 spilled 76 B at 96 registers)."""
    return accumulator_registers(c) + a_fragment_registers(c) + (40 if c.fp8 else 30)


def two_ctas_per_sm(c: KernelConfig) -> bool:
    """Two consumer warpgroups needing at most 104 registers fit two CTAs per SM: 80 registers per
    thread at launch (65536 / 768); the producer warpgroup keeps 32 and hands the rest over
    (128 * 32 + 256 * 104 = 384 * 80): 16 consumer warps per SM to hide the widening's latency."""
    return consumer_warpgroups(c) > 1 and consumer_register_need(c) <= 104


def launch_resources(c: KernelConfig) -> dict:
    """The template's register plan: CTAs per SM that __launch_bounds__ must allow, and the setmaxnreg
    split.  One consumer warpgroup: as many CTAs as its natural need allows (or ptxas spends
    registers on hoisted wgmma descriptors and fewer CTAs fit); two: two CTAs when their need is
    small, else one (block_n 256, whose 128 accumulators dominate, one).  Also the K per consumer step
    the plan assumes (step_k)."""
    return dict(_register_plan(c), step_k=step_k(c))


def _register_plan(c: KernelConfig) -> dict:
    if two_ctas_per_sm(c):
        return dict(min_blocks_per_sm=2, producer_registers=32, consumer_registers=104)
    if consumer_warpgroups(c) > 1:
        return dict(min_blocks_per_sm=1, producer_registers=56, consumer_registers=224)  # 128*56 + 256*224 <= 65536
    # one consumer warpgroup: no setmaxnreg hand-off (0, 0)
    min_blocks = 1 if c.block_n >= 256 else REGISTER_FILE // threads(c) // consumer_register_need(c)
    return dict(min_blocks_per_sm=min_blocks, producer_registers=0, consumer_registers=0)


def expert_progress(c: KernelConfig) -> bool:
    """Whether the kernel carries the per-expert progress code (GemmParams::progress_add / _wait, used
    up to 8 tokens): every BF16 tile, and the W4A8 tiles of one 64-row weight slice, the decode
    picks.  In m256n64k128s4_fp8 the code made ptxas spill 140 B."""
    return not c.fp8 or c.block_m == 64


def consumer_register_cap(c: KernelConfig) -> int:
    """Registers a consumer thread may hold under the register plan: setmaxnreg's with two consumer
    warpgroups, else the launch bounds' share of the register file in ptxas's units of 8."""
    r = launch_resources(c)
    if r["consumer_registers"]:
        return r["consumer_registers"]
    return min(255, REGISTER_FILE // (r["min_blocks_per_sm"] * threads(c)) // 8 * 8)


# --- where ptxas serializes the wgmmas (C7512: each waits for the previous to retire) ---------------
# Measured, ptxas -v over the whole spaces of DeepSeek-V4-Flash and gpt-oss-120b and Qwen3-30B-A3B's
# shortlist (nvcc 13.0).  Two causes:
# 1. These one-warpgroup tiles (block_m, block_n, K per consumer step), whose planned CTAs per SM leave
#    a consumer thread too few registers for two wgmma batches in flight: m64n32 stepping 64 deep (k64
#    tiles; its k128 tiles therefore issue in one step, see step_k).  Value: the registers the tile
#    uses unserialized, at one CTA per SM less.  The other tiles need about accumulators + A fragments
#    + 26 and get it.  Unserialized at one CTA per SM less, these tiles were not faster (H200: 4.5 %
#    slower at T = 256 on Qwen3-30B-A3B), so occupancy stays.
SERIALIZED_WGMMA_TILES = MappingProxyType({(64, 32, 64): 74})
# 2. The persistent grid's tile loop (the template's kTileLoop, rendered from persistent_tile_loop),
#    kept only for short K loops that fill whole ring passes: there a tile's setup and first loads are
#    a large share of it.  ptxas serializes most such kernels (Qwen3-30B-A3B's GEMM2, K = 768:
#    m64n16k64, m128n32k64, m128n64k64, m256n64k64, m256n128k64) but not all (m64n8k64s6, m64n8k128s6,
#    m128n128k64s4).  The loop stays there: at 12 K tiles it was 3-9 % faster from T = 1024 than one CTA
#    per tile (H200, Qwen3-30B-A3B), and with long K loops one CTA per tile won (DeepSeek-V4-Flash's
#    32-64-tile s4/s8 kernels, 3-4 % at T = 1 and 16).
PERSISTENT_MAX_K_TILES = 12
# W4A8 loops over tiles only up to 6 K tiles: at 12 ptxas spilled the promotion's second accumulator
# set (gpt-oss-20b --tp 2's GEMM2: m64n32k128s4 176 B, m128n128k128s4 280 B); at 6 (Qwen3-30B-A3B's
# GEMM2, K = 768) m128n128k128s6 compiled spill-free and was 3.0-4.2 % faster from T = 1024 than the
# one-CTA-per-tile s4 it replaced (H200).
PERSISTENT_MAX_K_TILES_FP8 = 6
# W4A8 kernels may also loop over tiles with a long K loop (the config's tile_loop), every tile at the
# full wgmma width (the template's kFullWidthLoop): with the narrower widths' instantiations also in
# the loop, m128n128k128s4 spilled 460-492 B at 32 K tiles.  Measured up to 32 (DeepSeek-V4-Flash's
# GEMM1); per-tile ring fills and drains made W4A8 stream 28-36 % slower than BF16 at equal bytes, and
# the loop streamed within 0-16 % of it (H200).  BF16's 256-row tiles (half the CTAs) gained nothing
# from it: no tuned bucket took it (H200 tuner).
FULL_WIDTH_LOOP_MAX_K_TILES = 32
FULL_WIDTH_LOOP_MIN_BLOCK_N = 128  # large-T tiles: an expert's rows then mostly fill them


def k_tiles(c: KernelConfig, shape: GemmShape) -> int:
    return -(-_k_padded(c, shape.k) // c.block_k)  # the last may be partial (k_loop_ends_on_a_step)


def k_loop_ends_on_a_step(c: KernelConfig, shape: GemmShape) -> bool:
    """Whether the padded K ends on a whole consumer step: a 128-deep tile of a stepped kernel may end the
    K loop half full (gpt-oss, K = 2880), keeping the 4 KB copies that 64-deep tiles halve."""
    return _k_padded(c, shape.k) % c.block_k % step_k(c) == 0


def persistent_tile_loop(c: KernelConfig, shape: GemmShape) -> bool:
    """Whether the kernel has the persistent grid's tile loop (rendered as the template's kTileLoop)."""
    tiles = k_tiles(c, shape)
    return c.tile_loop or (tiles % c.stages == 0 and
                           tiles <= (PERSISTENT_MAX_K_TILES_FP8 if c.fp8 else PERSISTENT_MAX_K_TILES))


def full_width_loop_fits(c: KernelConfig, shape: GemmShape) -> bool:
    tiles = k_tiles(c, shape)
    return (c.fp8 and c.block_n >= FULL_WIDTH_LOOP_MIN_BLOCK_N and tiles % c.stages == 0 and
            PERSISTENT_MAX_K_TILES_FP8 < tiles <= FULL_WIDTH_LOOP_MAX_K_TILES)


def wgmma_serialization(c: KernelConfig, shape: GemmShape | None = None) -> str | None:
    """Why ptxas serializes (or, for a tile loop, may serialize) this kernel's wgmmas, or None where it
    does not.  Without the GEMM's shape only the register cause is known."""
    unserialized = SERIALIZED_WGMMA_TILES.get((c.block_m, c.block_n, step_k(c)))
    if unserialized is not None:
        blocks = launch_resources(c)["min_blocks_per_sm"]
        return (f"{blocks} CTAs per SM leave a consumer thread {consumer_register_cap(c)} registers; at "
                f"{blocks - 1} ptxas keeps two wgmma batches in flight with {unserialized}")
    if c.tile_loop:
        return "the persistent grid's full-width tile loop (the config's tile_loop), chosen by the tuner"
    if shape is not None and persistent_tile_loop(c, shape):
        limit = PERSISTENT_MAX_K_TILES_FP8 if c.fp8 else PERSISTENT_MAX_K_TILES
        return (f"the persistent grid's tile loop ({k_tiles(c, shape)} K tiles, at most {limit}); "
                f"kept for short K loops, where it was faster")
    return None


def _k_padded(c: KernelConfig, k: int) -> int:
    return layout_of(c).padded(0, k)[1]


def _n_padded(n: int) -> int:
    return LAYOUT.padded(n, 0)[0]


AXES = MappingProxyType({"block_m": (64, 128, 256), "block_n": (8, 16, 32, 64, 128, 256), "block_k": (64, 128),
                         # No 12: the K loop unrolls over the ring (compile-time slots), and 12-deep
                         # rings never won a bucket of the H200 tuner (s4-s8 did).
                         "stages": (3, 4, 6, 8), "tile_loop": (False,)})

RULES: tuple[Rule, ...] = (
    ("the K loop must end on a whole consumer step (block_k, or 64 for stepped tiles) of the padded K (64; 128 "
     "for fp8): prepared atoms end there",
     k_loop_ends_on_a_step),
    ("shared memory per CTA is at most 227 KiB on SM90", lambda c, s: smem_bytes(c) <= SMEM_LIMIT),
    ("consumer accumulators + A fragments take at most 200 registers per thread with one consumer warpgroup "
     "(of 255) and 192 with two (of 224 after setmaxnreg; m256n128k64 and m256n64k128 compiled spill-free at "
     "192): the widening needs the rest, or ptxas spills",
     lambda c, s: accumulator_registers(c) + a_fragment_registers(c) <= (200 if c.block_m == 64 else 192)),
    ("prefetch distance (stages-2) beyond the K loop only wastes shared memory",
     lambda c, s: c.stages - 2 <= max(1, k_tiles(c, s))),
    ("3 stages leave one slot loading while two feed wgmmas: too little to hide HBM latency unless the K loop "
     "is that short",
     lambda c, s: c.stages > 3 or k_tiles(c, s) <= 4),
    ("two consumer warpgroups only pay off once a CTA has enough token rows to share B, or fits twice on an "
     "SM (32 token rows, consumers within 104 registers)",
     lambda c, s: c.block_m == 64 or c.block_n >= 64 or (c.block_n >= 32 and two_ctas_per_sm(c))),
    ("a CTA's weight rows must lie inside the prepared tensor, whose rows are padded to 128",
     lambda c, s: -(-s.n // c.block_m) * c.block_m <= _n_padded(s.n)),
    ("W4A8's GEMM2 stages two factors per token row and promotes a second accumulator set: accumulators + A "
     "fragments within 176 registers (m256n64k128 spilled 104 B at 192; its GEMM1 compiled spill-free)",
     lambda c, s: not (c.fp8 and c.gemm == "gemm2") or accumulator_registers(c) + a_fragment_registers(c) <= 176),
    ("the full-width tile loop is for W4A8 tiles of at least 128 token rows whose K loop, longer than the "
     "short loops that loop over tiles anyway and at most 32 K tiles, fills whole ring passes",
     lambda c, s: not c.tile_loop or full_width_loop_fits(c, s)),
    ("a K loop ending half a tile in must not loop over tiles (persistent grid): there ptxas spilled or "
     "serialized it (gpt-oss-20b --tp 2's GEMM2, 12 K tiles: m64n8k128s4 8 B, m64n16k128s4 C7512)",
     lambda c, s: _k_padded(c, s.k) % c.block_k == 0 or not persistent_tile_loop(c, s)),
)

# Fallback kernels when no shipped dispatch table covers a problem: per GEMM a decode, a mid-batch
# and a prefill kernel, the first valid of each list (the H200 tuner's picks for deepseek-v4-flash:
# n8 up to ~64 tokens, n32-n64 around 256-1024, m128 n128-n256 from 4096).
FALLBACK = MappingProxyType({
    "decode": [(64, 8, 128, 4), (64, 8, 64, 4), (64, 8, 64, 3)],
    "mid": [(64, 32, 128, 4), (64, 32, 64, 4), (64, 32, 64, 3)],
    "prefill": [(128, 128, 128, 4), (128, 128, 64, 4), (128, 64, 64, 4), (128, 128, 64, 3)],
})

# The tiles that won buckets of the H200 tuner on deepseek-v4-flash (n8 k128 s6/s8 at decode, m64n16k128s4
# at T = 64, m128n32k64s6 at 256, m128n64k64s6 at 1024, m256n128k64s6 from 4096), their k64 twins for
# K on which a one-step k128 tile cannot end (gpt-oss: 2880), and one neighbour each way in N.
SHORTLIST = ((64, 8, 128, 6), (64, 8, 64, 6), (64, 8, 64, 8), (64, 16, 128, 4), (64, 16, 64, 4), (64, 16, 64, 6),
             (64, 32, 128, 4), (64, 32, 64, 4), (128, 32, 64, 6), (128, 64, 64, 6), (128, 128, 64, 4),
             (256, 64, 64, 6), (256, 128, 64, 6),
             # W4A8 only (BF16's ring would not fit): the persistent tile for 6-K-tile GEMM2s (Qwen3-30B-A3B)
             (128, 128, 128, 6))

SM90 = ArchPolicy(name="sm90", gencode="-gencode=arch=compute_90a,code=sm_90a", compute_capability=(9, 0),
                  weight_layout=LAYOUT.name, activation_format="bf16", axes=AXES, rules=RULES, fallback=FALLBACK,
                  launch_resources=launch_resources, gemm_template="gemm_kernel.cu.j2",
                  launch_fn="moegen::GemmLaunchFn", shortlist=SHORTLIST,
                  wgmma_serialization=wgmma_serialization, expert_progress=expert_progress,
                  persistent_tile_loop=persistent_tile_loop)

# W4A8: the same mainloop with e4m3 activations (per-token fp32 scales in the epilogues)
# and fp8 wgmma (k32).  A 128-wide e4m3 K tile has the bytes of a 64-wide bf16 one.  block_k is 128
# only: each K tile's partial sums are promoted into the fp32 accumulators (FP8 wgmma accumulates at
# reduced precision), so the promotion interval is block_k, and one interval for every kernel keeps
# a token's result independent of the kernel its batch size picks (k256 kernels broke batch
# invariance against k128 ones on the H200).  The fallback tiles are the shapes of the BF16 picks, for
# problems no shipped table covers.
FP8_FALLBACK = MappingProxyType({
    "decode": [(64, 8, 128, 6), (64, 8, 128, 4)],
    "mid": [(64, 32, 128, 4), (64, 32, 128, 3)],
    "prefill": [(128, 128, 128, 4), (128, 64, 128, 4), (128, 128, 128, 3)],
})
# One-warpgroup tiles for large T (H200 tuner): m64n64k128 (three CTAs per SM) tied at
# T = 1024 and ran 2-13 % behind m128n128 from 4096; m64n128k128 (two) spilled 524 B and ran 7-24 %
# behind.  Each reads the token tile for half as many weight rows.
FP8_SHORTLIST = ((64, 8, 128, 4), (64, 8, 128, 6), (64, 8, 128, 8), (64, 16, 128, 4), (64, 16, 128, 6),
                 (64, 32, 128, 4), (64, 32, 128, 6), (128, 32, 128, 6), (128, 64, 128, 4), (128, 64, 128, 6),
                 (128, 128, 128, 4), (256, 64, 128, 4), (256, 64, 128, 6),
                 # the full-width tile loop where the K loop allows it (H200 tuner: Qwen3-30B-A3B's GEMM1 from
                 # T = 1024, 2.3-6.6 % faster; the DeepSeek GEMM2s at 16384, 1.1-1.4 %)
                 (128, 128, 128, 4, True), (128, 128, 128, 8, True))
SM90_FP8 = dataclasses.replace(SM90, weight_layout=SM90_E4M3_ATOMS.name, activation_format="fp8",
                               # an e4m3 K tile is whole 128-byte swizzle rows of B; one promotion interval
                               axes={**AXES, "block_k": (128,), "tile_loop": (False, True)}, fallback=FP8_FALLBACK,
                               shortlist=FP8_SHORTLIST)
