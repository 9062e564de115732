"""Weight prepare: the atom layout must decode, the way the SM90 kernel decodes it, to the checkpoint.

`emulate_kernel_decode` is written from the kernel's side (wgmma A-fragment layout from the PTX
ISA and the converter's nibble order in mxfp4_convert.cuh), independently of prepare's index tables.
"""
import pytest
import torch

from moegen import mxfp4
from moegen.prepare import prepare
from moegen.spec import model_from_dict


def tiny_spec(hidden=128, inter=64, experts=2, bias=False, **router):
    return model_from_dict({
        "name": "tiny", "num_experts": experts, "hidden_size": hidden, "intermediate_size": inter,
        "router": {"kind": "softmax_topk", "top_k": 1, **router},
        "activation": {"kind": "swiglu"}, "bias": {"gemm1": bias, "gemm2": bias}}, "tiny")


def _rotl(q: torch.Tensor, n: int) -> torch.Tensor:
    return ((q << n) | (q >> (32 - n))) & 0xFFFFFFFF


def converter_bits(q: torch.Tensor, j: int) -> torch.Tensor:
    """Output register j of e2m1x8_to_bf16x8 before the scale multiply (mirrors mxfp4_convert.cuh)."""
    m = 0x81C081C0
    if j == 0:
        return q & m
    if j == 1:
        return _rotl(q, 4) & m
    if j == 2:
        return _rotl(q, 10) & m
    return (_rotl(q, 6) & 0x80C080C0) | (_rotl(q, 14) & 0x01000100)


def emulate_kernel_decode(w: torch.Tensor, scales: torch.Tensor, expert_scale: torch.Tensor) -> torch.Tensor:
    """Prepared atoms -> dense fp32 [E, Npad, Kpad], decoding each thread's words like the kernel."""
    E, N64, K64, _ = w.shape
    out = torch.full((E, N64 * 64, K64 * 64), float("nan"))
    words = w.view(E, N64, K64, 128, 4, 4).to(torch.int64)
    words = words[..., 0] | words[..., 1] << 8 | words[..., 2] << 16 | words[..., 3] << 24  # [.., 128, 4]
    sc = scales.view(E, N64, K64, 4, 8, 4).to(torch.int64)
    scale_words = sc[..., 0] | sc[..., 1] << 8 | sc[..., 2] << 16 | sc[..., 3] << 24  # [.., warp, g]
    for L in range(128):
        warp, lane = divmod(L, 32)
        g, t = divmod(lane, 4)
        for kk in range(4):
            q = words[..., L, kk]
            for j in range(4):  # fragment register j: a0 (g, 2t), a1 (g+8, 2t), a2 (g, 2t+8), a3 (g+8, 2t+8)
                row = 16 * warp + g + 8 * (j % 2)
                k = 16 * kk + 2 * t + 8 * (j // 2)
                # scale_pair_rows_g / _g8: rows g (j even) or g + 8, group kk // 2 in the pair's high half
                sw = scale_words[..., warp, g]
                pair = (sw << 7) & 0x7F807F80 if j % 2 == 0 else (sw >> 1) & 0x7F807F80
                s = pair >> (16 * (kk // 2) + 7) & 0xFF
                # byte b is the exponent field of the bf16 multiplier 2^(b-127); the widened bf16
                # reads value * 2^-126, so the product is value * 2^(b-253) (b = 0: zero multiplier)
                mult = torch.where(s == 0, 0.0, torch.pow(2.0, (s - 253).double()))
                mult = mult * expert_scale.double().view(E, 1, 1)
                for half in (0, 1):
                    bf16 = converter_bits(q, j) >> (16 * half) & 0xFFFF
                    # the converter's bf16 reads value * 2^-126; its bits sign|e1 e0|m -> code
                    code = (bf16 >> 15 & 1) << 3 | (bf16 >> 7 & 3) << 1 | (bf16 >> 6 & 1)
                    assert not (bf16 & 0x7E3F).any(), "stray bits in the widened bf16"
                    val = mxfp4.E2M1_VALUES[code].double() * mult
                    rows = torch.arange(N64).view(1, N64, 1) * 64 + row
                    cols = torch.arange(K64).view(1, 1, K64) * 64 + k + half
                    out[torch.arange(E).view(E, 1, 1), rows, cols] = val.float()
    return out


def random_mx(shape, scale_exp=(-6, 2)):
    x = torch.randn(shape) * torch.pow(2.0, torch.randint(*scale_exp, shape[:-1] + (shape[-1] // 32, 1)).float()
                                       ).repeat_interleave(32, -1).view(shape)
    return mxfp4.quantize(x)


def gate_up_rows(inter: int) -> torch.Tensor:
    """Prepared GEMM1 row r -> canonical W1|W3 row (written from the epilogue's pairing rule)."""
    r = torch.arange(2 * inter)
    blk, w = r // 16, r % 16
    return torch.where(w < 8, blk * 8 + w, inter + blk * 8 + w - 8)


@pytest.mark.parametrize("hidden,inter", [(128, 64), (96, 160), (2880 // 9, 1440 // 9)])
def test_decode_matches_dequantize(hidden, inter):
    spec = tiny_spec(hidden, inter)
    w13, s13 = random_mx((2, 2 * inter, hidden))
    w2, s2 = random_mx((2, hidden, inter))
    p = prepare(spec, w13, s13, w2, s2)
    d13 = emulate_kernel_decode(p.gemm1.w, p.gemm1.scales, p.gemm1.expert_scale)
    d2 = emulate_kernel_decode(p.gemm2.w, p.gemm2.scales, p.gemm2.expert_scale)
    ref13 = mxfp4.dequantize(w13, s13)[:, gate_up_rows(inter)]
    ref2 = mxfp4.dequantize(w2, s2)
    torch.testing.assert_close(d13[:, : 2 * inter, :hidden], ref13, rtol=0, atol=0)
    torch.testing.assert_close(d2[:, :hidden, :inter], ref2, rtol=0, atol=0)
    # padding decodes to exact zeros, so it adds nothing to the dot products
    assert (d13[:, 2 * inter:] == 0).all() and (d13[:, :, hidden:] == 0).all()
    assert (d2[:, hidden:] == 0).all() and (d2[:, :, inter:] == 0).all()


def test_large_scales_fold_into_expert_scale():
    spec = tiny_spec(64, 32)
    w13, s13 = random_mx((2, 64, 64))
    w2, s2 = random_mx((2, 64, 32))
    s13 = s13.clone()
    s13[1] = (s13[1].int() + 100).to(torch.uint8)  # exponents up to ~229: multiplier 2^(s-1) would overflow bf16
    p = prepare(spec, w13, s13, w2, s2)
    assert p.gemm1.expert_scale[0] == 1.0 and p.gemm1.expert_scale[1] > 1.0
    assert int(p.gemm1.scales.max()) <= 128 + 126
    d13 = emulate_kernel_decode(p.gemm1.w, p.gemm1.scales, p.gemm1.expert_scale)
    torch.testing.assert_close(d13[:, :64, :64], mxfp4.dequantize(w13, s13)[:, gate_up_rows(32)], rtol=0, atol=0)


def test_gate_up_orders_agree():
    spec = tiny_spec(64, 32)
    w13, s13 = random_mx((2, 64, 64))
    w2, s2 = random_mx((2, 64, 32))
    base = prepare(spec, w13, s13, w2, s2)
    up_gate = prepare(spec, torch.cat((w13[:, 32:], w13[:, :32]), 1), torch.cat((s13[:, 32:], s13[:, :32]), 1),
                      w2, s2, gate_up_order="up_gate")
    inter = torch.stack((w13[:, :32], w13[:, 32:]), 2).flatten(1, 2)
    inter_s = torch.stack((s13[:, :32], s13[:, 32:]), 2).flatten(1, 2)
    interleaved = prepare(spec, inter, inter_s, w2, s2, gate_up_order="interleaved")
    for other in (up_gate, interleaved):
        assert torch.equal(other.gemm1.w, base.gemm1.w) and torch.equal(other.gemm1.scales, base.gemm1.scales)


def test_bias_reordered_to_gate_up():
    spec = tiny_spec(64, 32, bias=True)
    w13, s13 = random_mx((2, 64, 64))
    w2, s2 = random_mx((2, 64, 32))
    b13 = torch.randn(2, 64)
    inter_b = torch.stack((b13[:, :32], b13[:, 32:]), 2).flatten(1, 2)
    inter = torch.stack((w13[:, :32], w13[:, 32:]), 2).flatten(1, 2)
    inter_s = torch.stack((s13[:, :32], s13[:, 32:]), 2).flatten(1, 2)
    p = prepare(spec, inter, inter_s, w2, s2, b13=inter_b, b2=torch.randn(2, 64), gate_up_order="interleaved")
    torch.testing.assert_close(p.gemm1.bias, b13)


def test_errors_name_the_tensor():
    spec = tiny_spec(64, 32)
    w13, s13 = random_mx((2, 64, 64))
    w2, s2 = random_mx((2, 64, 32))
    with pytest.raises(ValueError, match=r"w13: shape \(2, 64, 16\), expected \(2, 64, 32\)"):
        prepare(spec, w13[..., :16], s13, w2, s2)
    with pytest.raises(ValueError, match="w2_scales: dtype torch.int32"):
        prepare(spec, w13, s13, w2, s2.int())
    bad = s2.clone()
    bad[1, 3, 0] = 255
    with pytest.raises(ValueError, match=r"255 \(NaN\) at \[expert, row, group\] = \[1, 3, 0\]"):
        prepare(spec, w13, s13, w2, bad)
    with pytest.raises(ValueError, match="b13: given, but tiny has no such bias"):
        prepare(spec, w13, s13, w2, s2, b13=torch.zeros(2, 64))
    with pytest.raises(ValueError, match="gate_up_order 'gate-up'"):
        prepare(spec, w13, s13, w2, s2, gate_up_order="gate-up")
    # a NaN scale of w13 named where the caller put it, not after the gate/up interleave
    bad13 = s13.clone()
    bad13[1, 40, 1] = 255
    with pytest.raises(ValueError, match=r"w13_scales: e8m0 scale 255 \(NaN\) at \[expert, row, group\] = \[1, 40, 1\]"):
        prepare(spec, w13, bad13, w2, s2, gate_up_order="interleaved")
    with pytest.raises(ValueError, match="w2: on meta, expected w13's device cpu"):
        prepare(spec, w13, s13, w2.to("meta"), s2)
    with pytest.raises(ValueError, match="layout \\['sm90'\\]: expected one of"):
        prepare(spec, w13, s13, w2, s2, layout=["sm90"])
    biased = tiny_spec(64, 32, bias=True)
    b13, b2 = torch.zeros(2, 64), torch.zeros(2, 64)
    with pytest.raises(ValueError, match="b13: list, expected a float tensor"):
        prepare(biased, w13, s13, w2, s2, b13=[0.0] * 64, b2=b2)
    b2[1, 7] = float("inf")
    with pytest.raises(ValueError, match=r"b2: inf at \[expert, row\] = \[1, 7\], expected finite biases"):
        prepare(biased, w13, s13, w2, s2, b13=b13, b2=b2)
