"""Weight prepare: raw MXFP4 checkpoint tensors -> the layout an arch's kernels stream, by layout name
(moegen.layout; a build's manifest names the one its kernels read): ``sm90_e2m1_atom64`` (below),
``sm90_e2m1_atom64_e4m3`` (pack_sm90_e4m3: the same atoms for the W4A8 kernels) and
``sm100_e2m1_sf128x4`` (pack_sm100: K-major e2m1 pairs and CUTLASS's block-scaled scale layout).

The SM90 layout:

Raw input (per GEMM): e2m1 pairs ``[E, N, K/2]`` uint8 (element 2i in the low nibble) and e8m0
scales ``[E, N, K/32]`` uint8.  Output, per GEMM:

* ``w``  ``[E, Npad/64, Kpad/64, 2048]`` uint8: 64x64 "atoms"; the little-endian word at atom byte
  ``16*L + 4*kk`` holds the 8 values thread L of the consumer warpgroup widens into its wgmma A
  fragment at k16 step kk, their bits placed for the converter (``e2m1_word_bits``,
  ``_atom_index_tables``).  One 16-byte load per thread per atom.
* ``scales`` ``[E, Npad/64, Kpad/64, 128]`` uint8: byte ``32*warp + 4*g + b`` is the scale of
  fragment row ``16*warp + g + 8*(b%2)`` for the 32-wide K group ``b//2``: s = ``e8m0 - shift[e]``
  clamped to [0, 128] (so the kernel's bf16 multiplier 2^(s-1) is always normal), stored as
  s + 126, the multiplier's bf16 exponent field; padding stores 0 (a zero multiplier).
* ``expert_scale`` ``[E]`` float32 = 2^shift[e], applied in fp32 by the epilogue.

GEMM1 rows are reordered so that within every 16 rows, rows 0-7 are gate rows j..j+7 and rows 8-15
the matching up rows: each accumulator thread then holds gate and up of one output column.
Everything is torch index arithmetic and runs on the tensors' device.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from . import fp8
from .layout import SM90_ATOMS, SM90_E4M3_ATOMS, SM100_BLOCK_SCALED, PreparedGemm, PreparedWeights, sf_bytes
from .spec import ModelSpec

MAX_STORED_SCALE = 128  # largest s with 2^(s-1) a normal bf16
SCALE_BYTE_BIAS = 126  # stored byte = s + 126 = the bf16 exponent field of the multiplier 2^(s-1)
E8M0_NAN = 255
GATE_UP_ORDERS = ("gate_up", "up_gate", "interleaved")


# Bit position in a prepared 32-bit word of (output register j, half h, bit b) where b = 0 sign, 1 e1,
# 2 e0, 3 m; chosen so the kernel's converter (mxfp4_convert.cuh) needs one rotate and one AND per
# output for j = 1, 2 (none for j = 0), and two of each for j = 3: 9 bit operations per 8 values.
# (No four rotations of the target bits tile the word, so one output needs two sources.)
_BF16_BITS = (15, 8, 7, 6)  # where sign, e1, e0, m of the low half must land (high half: +16)
_ROTATE_LEFT = {0: 0, 1: 4, 2: 10}
_J3_ROTATE_LEFT = (6, 14)  # j = 3: e1 (bf16 bits 8 and 24) rotates by 14, the other bits by 6


def e2m1_word_bits() -> list[list[list[int]]]:
    """bits[j][h][b]: the word bit holding bit b (sign, e1, e0, m) of output j's half h."""
    bits = []
    for j in range(4):
        halves = []
        for h in range(2):
            targets = [p + 16 * h for p in _BF16_BITS]
            if j < 3:
                rot = [_ROTATE_LEFT[j]] * 4
            else:
                rot = [_J3_ROTATE_LEFT[1] if b == 1 else _J3_ROTATE_LEFT[0] for b in range(4)]
            halves.append([(t - r) % 32 for t, r in zip(targets, rot)])
        bits.append(halves)
    flat = sorted(b for j in bits for h in j for b in h)
    assert flat == list(range(32)), "the four outputs must tile the word"
    return bits


@lru_cache(maxsize=None)
def _atom_index_tables() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row, k) of the value behind every (thread, word, output j, half h), and (row, k-group) of
    every scale byte.

    Thread L = 32*warp + 4*g + t; word kk covers k in [16kk, 16kk+16).  wgmma's A fragment register
    j of a k16 step holds rows g (j even) or g+8 (j odd) of the warp's 16, at k = 2t + 8*(j//2) for
    the low half and +1 for the high half.
    """
    L = torch.arange(128).view(128, 1, 1, 1)
    kk = torch.arange(4).view(1, 4, 1, 1)
    j = torch.arange(4).view(1, 1, 4, 1)
    h = torch.arange(2).view(1, 1, 1, 2)
    warp, g, t = L // 32, (L % 32) // 4, L % 4
    row = 16 * warp + g + 8 * (j % 2)
    k = 16 * kk + 2 * t + 8 * (j // 2) + h
    b = torch.arange(4).view(1, 1, 4)
    w4 = torch.arange(4).view(4, 1, 1)
    g8 = torch.arange(8).view(1, 8, 1)
    s_row = 16 * w4 + g8 + 8 * (b % 2)
    s_kg = (b // 2).expand(4, 8, 4)
    return row.expand(128, 4, 4, 2), k.expand(128, 4, 4, 2), s_row, s_kg


def _unpack(packed: torch.Tensor) -> torch.Tensor:
    lo, hi = packed & 0xF, packed >> 4
    return torch.stack((lo, hi), dim=-1).flatten(-2)


def _check(name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: {type(t).__name__}, expected a {dtype} tensor of shape {shape}")
    if t.dtype != dtype:
        raise ValueError(f"{name}: dtype {t.dtype}, expected {dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {shape}")


def _check_scales(e8m0: torch.Tensor, name: str) -> None:
    if (e8m0 == E8M0_NAN).any():
        bad = (e8m0 == E8M0_NAN).nonzero()[0].tolist()
        raise ValueError(f"{name}: e8m0 scale 255 (NaN) at [expert, row, group] = {bad}")


def _sm90_atoms(layout, codes: torch.Tensor, e8m0: torch.Tensor, gate_up: int | None, scale_bytes,
                words) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What both SM90 layouts share: the gate/up interleave, padding to the layout, 64x64 atoms packed
    one expert at a time (the temporaries stay small) and the scale atoms.  scale_bytes(e8m0 [E, N, K/32])
    -> (stored bytes [E, N, K/32], expert_scale [E] float32); words(atoms [N64, K64, 64, 64]) -> each
    thread's four little-endian words [N64, K64, 128, 4]."""
    if gate_up is not None:
        codes, e8m0 = _interleave_gate_up(codes, gate_up), _interleave_gate_up(e8m0, gate_up)
    E, N, K = codes.shape
    Np, Kp = layout.padded(N, K)
    dev = codes.device
    c = torch.zeros((E, Np, Kp), dtype=torch.uint8, device=dev)
    c[:, :N, :K] = codes
    stored, expert_scale = scale_bytes(e8m0)
    s = torch.zeros((E, Np, Kp // 32), dtype=torch.uint8, device=dev)  # padding: byte 0
    s[:, :N, : K // 32] = stored
    w = torch.empty((E, Np // 64, Kp // 64, 2048), dtype=torch.uint8, device=dev)
    for e in range(E):
        word = words(c[e].view(Np // 64, 64, Kp // 64, 64).permute(0, 2, 1, 3))
        byte = torch.stack([(word >> (8 * i)) & 0xFF for i in range(4)], dim=-1)  # little endian
        w[e] = byte.to(torch.uint8).reshape(Np // 64, Kp // 64, 2048)
    _, _, s_row, s_kg = (x.to(dev) for x in _atom_index_tables())
    sa = s.view(E, Np // 64, 64, Kp // 64, 2).permute(0, 1, 3, 2, 4)  # [E, N64, K64, 64, 2]
    scales = sa[..., s_row, s_kg].reshape(E, Np // 64, Kp // 64, 128).contiguous()
    return w, scales, expert_scale


def pack_sm90(codes: torch.Tensor, e8m0: torch.Tensor, gate_up: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """codes [E, N, K] uint8 (one e2m1 code each), e8m0 [E, N, K/32] -> (w atoms, scale atoms,
    expert_scale).  gate_up = I: the rows are W1 then W3 (GEMM1), interleaved here in blocks of 8 so
    that an accumulator thread holds gate and up of one column."""
    def scale_bytes(e8m0):
        exp = e8m0.to(torch.int32)
        E = exp.shape[0]
        shift = ((exp.amax(dim=(1, 2)) - MAX_STORED_SCALE).clamp(min=0) if exp.numel()
                 else torch.zeros(E, dtype=torch.int32, device=exp.device))
        stored = ((exp - shift.view(E, 1, 1)).clamp(0, MAX_STORED_SCALE) + SCALE_BYTE_BIAS).to(torch.uint8)
        return stored, torch.pow(2.0, shift.to(torch.float64)).to(torch.float32)

    row, k, _, _ = (x.to(codes.device) for x in _atom_index_tables())

    def words(atoms):
        codes_jh = atoms[..., row, k].to(torch.int32)  # [N64, K64, 128 threads, 4 words, 4 j, 2 h]
        word = torch.zeros(codes_jh.shape[:-2], dtype=torch.int32, device=atoms.device)
        for jj, halves in enumerate(e2m1_word_bits()):
            for hh, positions in enumerate(halves):
                code = codes_jh[..., jj, hh]
                for b, pos in enumerate(positions):  # code bits: 3 sign, 2 e1, 1 e0, 0 m
                    word |= ((code >> (3 - b)) & 1) << pos
        return word

    return _sm90_atoms(SM90_ATOMS, codes, e8m0, gate_up, scale_bytes, words)


@lru_cache(maxsize=None)
def _e4m3_atom_tables() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row, k) of the value behind every (thread, word, value v) of the W4A8 atoms, and the word bits
    of v's magnitude (3 bits, lowest first) and sign.

    Thread L = 32*warp + 4*g + t; word w covers the 32-group w // 2 of fragment row g (w even) or g+8.
    e4m3 wgmma's A fragment (k32 step) register 0/1 holds rows g/g+8 at k = 4t + i, registers 2/3
    the same rows at k = 16 + 4t + i (byte i).  The word's values v = 0..3 are register 0/1's bytes:
    magnitude in nibble v, sign at bit 8v + 3; v = 4..7 are register 2/3's bytes: magnitude in
    nibble v, sign at bit 8(v-4) + 7.  So the kernel takes both registers' magnitudes from one AND and
    two byte permutes, and the signs from one shift and two ANDs (mxfp4_convert.cuh, e2m1x8_to_e4m3x8).
    """
    L = torch.arange(128).view(128, 1, 1)
    w = torch.arange(4).view(1, 4, 1)
    v = torch.arange(8).view(1, 1, 8)
    warp, g, t = L // 32, (L % 32) // 4, L % 4
    row = 16 * warp + g + 8 * (w % 2)
    k = 32 * (w // 2) + 16 * (v // 4) + 4 * t + v % 4
    magnitude_bit0 = (4 * v).expand(1, 1, 8)
    sign_bit = torch.where(v < 4, 8 * v + 3, 8 * (v - 4) + 7)
    return row.expand(128, 4, 8), k.expand(128, 4, 8), magnitude_bit0.view(8), sign_bit.view(8)


def pack_sm90_e4m3(codes: torch.Tensor, e8m0: torch.Tensor, gate_up: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """codes [E, N, K], e8m0 [E, N, K/32] -> (w atoms, table-index atoms, expert_scale = 2^r) in
    SM90_E4M3_ATOMS: the atoms of pack_sm90 with each thread's values in e4m3 fragment order, and per
    (row, group) the widening table's entry for the group's binade d = e8m0 - 127 - r (moegen.fp8:
    r is the expert's residual exponent, the folded weights are the table's e4m3 values x 2^r)."""
    def scale_bytes(e8m0):
        E = e8m0.shape[0]
        r = fp8.residual_exponents(e8m0) if e8m0.numel() else torch.zeros(E, dtype=torch.int32, device=e8m0.device)
        d = e8m0.to(torch.int32) - 127 - r.view(E, 1, 1)
        return fp8.table_index(d), torch.pow(2.0, r.to(torch.float64)).to(torch.float32)

    row, k, magnitude_bit0, sign_bit = (x.to(codes.device) for x in _e4m3_atom_tables())

    def words(atoms):
        code = atoms[..., row, k].to(torch.int64)  # [N64, K64, 128 threads, 4 words, 8 values]
        return (((code & 7) << magnitude_bit0) | ((code >> 3) << sign_bit)).sum(dim=-1)  # disjoint bits

    return _sm90_atoms(SM90_E4M3_ATOMS, codes, e8m0, gate_up, scale_bytes, words)


def pack_sm100(codes: torch.Tensor, e8m0: torch.Tensor, gate_up: int | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """codes [E, N, K], e8m0 [E, N, K/32] -> (e2m1 pairs [E, Npad, Kpad/2], scales [E, sf_bytes], ones [E])
    in SM100_BLOCK_SCALED.  Rows stay in order (GEMM1: W1 rows then W3 rows); padding rows and K get
    code 0 and scale byte 0 (2^-127: finite, the tensor cores read whole 128-row scale chunks)."""
    E, N, K = codes.shape
    Np, Kp = SM100_BLOCK_SCALED.padded(N, K)
    dev = codes.device
    c = torch.zeros((E, Np, Kp), dtype=torch.uint8, device=dev)
    c[:, :N, :K] = codes
    w = (c[..., 0::2] | (c[..., 1::2] << 4)).contiguous()
    s = torch.zeros((E, Np, Kp // 32), dtype=torch.uint8, device=dev)
    s[:, :N, : K // 32] = e8m0
    r = torch.arange(Np, device=dev).view(Np, 1)
    kb = torch.arange(Kp // 32, device=dev).view(1, Kp // 32)
    k_chunks = Kp // 128
    offset = (r // 128) * k_chunks * 512 + (kb // 4) * 512 + (r % 32) * 16 + ((r // 32) % 4) * 4 + kb % 4
    scales = torch.zeros((E, sf_bytes(Np, Kp)), dtype=torch.uint8, device=dev)
    scales[:, offset.flatten()] = s.reshape(E, -1)
    return w, scales, torch.ones(E, dtype=torch.float32, device=dev)


# Layout name -> (codes [E, N, K], e8m0 [E, N, K/32], gate_up) -> (values, scales, expert_scale); prepare
# checks their inputs (shapes, the e8m0 NaN code) first.
PACKERS = {SM90_ATOMS.name: pack_sm90, SM90_E4M3_ATOMS.name: pack_sm90_e4m3, SM100_BLOCK_SCALED.name: pack_sm100}


def _interleave_gate_up(x: torch.Tensor, inter: int) -> torch.Tensor:
    """[E, 2I, ...] gate rows then up rows -> blocks of 8 gate rows followed by their 8 up rows."""
    E = x.shape[0]
    gate = x[:, :inter].reshape(E, inter // 8, 8, *x.shape[2:])
    up = x[:, inter:].reshape(E, inter // 8, 8, *x.shape[2:])
    return torch.stack((gate, up), dim=2).reshape(E, 2 * inter, *x.shape[2:])


def to_gate_up(x: torch.Tensor, order: str, inter: int) -> torch.Tensor:
    """Rows of a fused W1|W3 tensor in checkpoint order -> gate rows then up rows."""
    if order == "gate_up":
        return x
    if order == "up_gate":
        return torch.cat((x[:, inter:], x[:, :inter]), dim=1)
    if order == "interleaved":  # gpt-oss: gate, up, gate, up, ...
        return torch.cat((x[:, 0::2], x[:, 1::2]), dim=1)
    raise ValueError(f"gate_up_order {order!r}: expected one of {GATE_UP_ORDERS}")


def prepare(spec: ModelSpec, w13: torch.Tensor, w13_scales: torch.Tensor, w2: torch.Tensor,
            w2_scales: torch.Tensor, b13: torch.Tensor | None = None, b2: torch.Tensor | None = None,
            gate_up_order: str = "gate_up", layout: str = SM90_ATOMS.name) -> PreparedWeights:
    """Convert the LOCAL experts' raw MXFP4 weights of one rank (shard first for TP/EP).

    w13 [E_local, 2*I_local, H/2], w13_scales [E_local, 2*I_local, H/32], w2 [E_local, H, I_local/2],
    w2_scales [E_local, H, I_local/32]; b13 [E_local, 2*I_local] and b2 [E_local, H] float, iff the
    spec has GEMM biases.  Under TP, b13 is the rank's slice and b2 is whole on TP rank 0 and zero on
    the others: the ranks' outputs are summed, so a whole b2 everywhere would be added tp_size times
    (moegen.checkpoint.load_experts passes it so).  ``gate_up_order`` names the checkpoint's W1|W3 row
    order; ``layout`` the prepared layout (MoeLayer.prepare passes the one its library reads).
    """
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"spec: {type(spec).__name__}, expected a moegen ModelSpec (moegen.load_model)")
    if not isinstance(layout, str) or layout not in PACKERS:
        raise ValueError(f"layout {layout!r}: expected one of {', '.join(PACKERS)} (the layouts prepare packs)")
    E, H, I = spec.local_experts, spec.hidden_size, spec.local_intermediate
    if gate_up_order not in GATE_UP_ORDERS:
        raise ValueError(f"gate_up_order {gate_up_order!r}: expected one of {GATE_UP_ORDERS}")
    _check("w13", w13, (E, 2 * I, H // 2), torch.uint8)
    _check("w13_scales", w13_scales, (E, 2 * I, H // 32), torch.uint8)
    _check("w2", w2, (E, H, I // 2), torch.uint8)
    _check("w2_scales", w2_scales, (E, H, I // 32), torch.uint8)
    for name, t, want, shape in (("b13", b13, spec.gemm1_bias, (E, 2 * I)), ("b2", b2, spec.gemm2_bias, (E, H))):
        if want and t is None:
            raise ValueError(f"{name}: required by {spec.name} (per-expert GEMM bias)")
        if not want and t is not None:
            raise ValueError(f"{name}: given, but {spec.name} has no such bias")
        if t is not None:
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                raise ValueError(f"{name}: {getattr(t, 'dtype', type(t).__name__)}, expected a float tensor")
            if tuple(t.shape) != shape:
                raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {shape}")
    tensors = {"w13": w13, "w13_scales": w13_scales, "w2": w2, "w2_scales": w2_scales, "b13": b13, "b2": b2}
    odd = next((n for n, t in tensors.items() if t is not None and t.device != w13.device), None)
    if odd is not None:
        raise ValueError(f"{odd}: on {tensors[odd].device}, expected w13's device {w13.device} (prepare packs on one device)")
    for name, t in (("b13", b13), ("b2", b2)):
        if t is not None and not bool(torch.isfinite(t).all()):
            bad = (~torch.isfinite(t)).nonzero()[0].tolist()
            raise ValueError(f"{name}: {t[tuple(bad)].item()} at [expert, row] = {bad}, expected finite biases")
    # in the caller's [expert, row, group] order, before any interleave or padding moves them
    _check_scales(w13_scales, "w13_scales")
    _check_scales(w2_scales, "w2_scales")

    pack = PACKERS[layout]
    g1 = pack(to_gate_up(_unpack(w13), gate_up_order, I), to_gate_up(w13_scales, gate_up_order, I), gate_up=I)
    g2 = pack(_unpack(w2), w2_scales)
    bias13 = None if b13 is None else to_gate_up(b13.float(), gate_up_order, I).contiguous()
    bias2 = None if b2 is None else b2.float().contiguous()
    return PreparedWeights(layout, PreparedGemm(*g1, bias13), PreparedGemm(*g2, bias2))
