"""Prepared weight layouts: what an arch's kernels stream, named, so the manifest can say which one a
library consumes and prepare and the runtime can key on that name instead of repeating its shape.

The packing itself lives in moegen.prepare; this module only describes the tensors (ground floor:
the runtime imports it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class WeightLayout:
    """Weights [E, N, K] stored as atoms of atom_rows x atom_k values, each atom's values in
    atom_bytes and its scales in atom_scale_bytes, rows padded to row_pad and K to k_pad (a multiple
    of atom_k; 0: atom_k) (SM90)."""
    name: str
    atom_rows: int
    atom_k: int
    row_pad: int
    atom_bytes: int
    atom_scale_bytes: int
    k_pad: int = 0
    w_alignment: int = 16  # bytes, of the values tensor's base address (the bulk copies' requirement)

    def padded(self, n: int, k: int) -> tuple[int, int]:
        k_pad = self.k_pad or self.atom_k
        return -(-n // self.row_pad) * self.row_pad, -(-k // k_pad) * k_pad

    def shapes(self, experts: int, n: int, k: int) -> dict[str, tuple[int, ...]]:
        """Shapes of the prepared uint8 tensors of one GEMM (and its per-expert fp32 scale)."""
        n_pad, k_pad = self.padded(n, k)
        grid = (experts, n_pad // self.atom_rows, k_pad // self.atom_k)
        return {"w": (*grid, self.atom_bytes), "scales": (*grid, self.atom_scale_bytes), "expert_scale": (experts,)}


# SM90: 64x64 atoms whose 16 bytes per consumer thread are that thread's wgmma A-fragment values,
# bits placed for the converter; one scale byte per (row, 32-wide K group); rows padded to 128 so
# 64- and 128-row CTA tiles stay inside the tensor (moegen.prepare, templates/include/moegen/sm90/).
SM90_ATOMS = WeightLayout("sm90_e2m1_atom64", atom_rows=64, atom_k=64, row_pad=128, atom_bytes=2048,
                          atom_scale_bytes=128)
# SM90 W4A8: the same atoms, each thread's 16 bytes in its e4m3 wgmma A-fragment order (k32 steps),
# bits placed for the table widening; one byte per (row, 32-group) indexing the e4m3 table of the
# group's binade below its expert's top (moegen.fp8); K padded to 128, one 128-byte swizzle row of
# e4m3 activations per K tile.
SM90_E4M3_ATOMS = WeightLayout("sm90_e2m1_atom64_e4m3", atom_rows=64, atom_k=64, row_pad=128, atom_bytes=2048,
                               atom_scale_bytes=128, k_pad=128)

@dataclass(frozen=True)
class BlockScaledLayout:
    """Weights [E, N, K] as e2m1 pairs [E, Npad, Kpad/2] (K-major, element 2i in the low nibble) and
    e8m0 scales in CUTLASS's SM100 block-scaled layout (Sm1xxBlockScaledConfig<32>): per expert,
    chunks of 128 rows x 4 K-blocks of 512 bytes, the K chunks inner (sf_offset).  Rows padded to
    row_pad (one tcgen05 tile), K to k_pad (the FP4 TMA needs K % 128 == 0).  Tensor cores apply the
    scales: expert_scale is 1."""
    name: str
    row_pad: int
    k_pad: int
    # the FP4 tensor-map format (CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B) takes 32-byte-aligned addresses
    w_alignment: int = 32

    def padded(self, n: int, k: int) -> tuple[int, int]:
        return -(-n // self.row_pad) * self.row_pad, -(-k // self.k_pad) * self.k_pad

    def shapes(self, experts: int, n: int, k: int) -> dict[str, tuple[int, ...]]:
        n_pad, k_pad = self.padded(n, k)
        return {"w": (experts, n_pad, k_pad // 2), "scales": (experts, sf_bytes(n_pad, k_pad)),
                "expert_scale": (experts,)}


def sf_offset(r: int, kb: int, k: int) -> int:
    """Byte offset of the scale of row r, K-block kb (k // 32) in a block-scaled operand with K
    columns (CUTLASS sm100_blockscaled_layout.hpp: atom ((32,4),(32,4)):((16,4),(0,1)), chunks of
    128 rows x 4 K-blocks, K chunks inner)."""
    k_chunks = -(-(k // 32) // 4)
    return (r // 128) * k_chunks * 512 + (kb // 4) * 512 + (r % 32) * 16 + ((r // 32) % 4) * 4 + kb % 4


def sf_bytes(rows: int, k: int) -> int:
    return -(-rows // 128) * 128 * -(-(k // 32) // 4) * 4


SM100_BLOCK_SCALED = BlockScaledLayout("sm100_e2m1_sf128x4", row_pad=128, k_pad=128)

LAYOUTS = {layout.name: layout for layout in (SM90_ATOMS, SM90_E4M3_ATOMS, SM100_BLOCK_SCALED)}


def get_layout(name: str) -> WeightLayout | BlockScaledLayout:
    if name not in LAYOUTS:
        raise ValueError(f"weight layout {name!r}: expected one of {', '.join(LAYOUTS)}")
    return LAYOUTS[name]


@dataclass(frozen=True)
class PreparedGemm:
    w: torch.Tensor
    scales: torch.Tensor
    expert_scale: torch.Tensor
    bias: torch.Tensor | None


@dataclass(frozen=True)
class PreparedWeights:
    """One rank's weights in a named layout (moegen.prepare)."""
    layout: str
    gemm1: PreparedGemm
    gemm2: PreparedGemm

    def to(self, device) -> "PreparedWeights":
        def mv(g: PreparedGemm) -> PreparedGemm:
            return PreparedGemm(g.w.to(device), g.scales.to(device), g.expert_scale.to(device),
                                None if g.bias is None else g.bias.to(device))
        return PreparedWeights(self.layout, mv(self.gemm1), mv(self.gemm2))
