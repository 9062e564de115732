"""W4A8's e4m3 operands (moegen.fp8): MXFP4 weights folded into e4m3 with a per-expert residual
exponent, exact within 15 binades of the expert's top group and rounded below; activations per row."""
import pytest
import torch

from moegen import fp8, mxfp4, reference
from moegen.spec import load_model


def _mxfp4(codes, exponents):
    """packed/scales [E, N, K/2], [E, N, K/32] from e2m1 codes [E, N, K] and group exponents [E, N, K/32]."""
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    return packed, (exponents + mxfp4.E8M0_BIAS).to(torch.uint8)


def _random_mxfp4(E, N, K, spread, seed=0):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (E, N, K), generator=g)
    exps = torch.randint(-(spread // 2), spread - spread // 2, (E, N, K // 32), generator=g)  # spread values
    return _mxfp4(codes, exps)


def test_groups_within_fifteen_binades_of_the_top_fold_exactly():
    packed, scales = _random_mxfp4(3, 8, 256, spread=15)
    w, r = fp8.fold_mxfp4(packed, scales)
    assert w.dtype == torch.float8_e4m3fn and w.shape == (3, 8, 256)
    assert torch.equal(fp8.unfold(w, r), mxfp4.dequantize(packed, scales).to(torch.float64))
    assert fp8.fold_report(scales)["inexact"] == 0
    packed, scales = _random_mxfp4(3, 8, 256, spread=16)  # one binade more: some groups lose bits
    w, r = fp8.fold_mxfp4(packed, scales)
    assert fp8.fold_report(scales)["inexact"] > 0
    assert not torch.equal(fp8.unfold(w, r), mxfp4.dequantize(packed, scales).to(torch.float64))


def test_the_top_group_reaches_384_and_nothing_saturates():
    codes = torch.full((1, 1, 32), 7)  # e2m1 6.0
    packed, scales = _mxfp4(codes, torch.full((1, 1, 1), 5))
    w, r = fp8.fold_mxfp4(packed, scales)
    assert int(r[0]) == 5 - fp8.FOLD_HEADROOM
    assert torch.all(w.to(torch.float64) == 384.0)


def test_a_group_nine_binades_too_deep_rounds_on_the_subnormal_grid():
    # expert top at exponent 0 (r = -6); the second group at exponent -15: d = -9
    codes = torch.tensor([1, 2, 3, 4, 5, 6, 7] + [0] * 25 + [7] * 32).view(1, 1, 64)
    packed, scales = _mxfp4(codes, torch.tensor([-15, 0]).view(1, 1, 2))
    w, r = fp8.fold_mxfp4(packed, scales)
    got = fp8.unfold(w, r)[0, 0, :7] / 2.0 ** -15
    # 0.5 * 2^-9 = 2^-10 ties to zero; 1.5 * 2^-9 = 3 * 2^-10 ties to 2^-8; the rest are on the grid
    assert got.tolist() == [0.0, 1.0, 2.0, 2.0, 3.0, 4.0, 6.0]
    assert fp8.fold_report(scales) == dict(groups=2, inexact=1, deepest_d=-9)


def test_a_group_thirteen_binades_too_deep_flushes_to_zero():
    codes = torch.tensor(list(range(1, 8)) * 4 + [4] * 4 + [7] * 32).view(1, 1, 64)
    packed, scales = _mxfp4(codes, torch.tensor([-19, 0]).view(1, 1, 2))  # d = -13: 6 * 2^-13 < 2^-10
    w, r = fp8.fold_mxfp4(packed, scales)
    assert torch.all(fp8.unfold(w, r)[0, 0, :32] == 0)
    assert not torch.any(fp8.unfold(w, r)[0, 0, 32:] == 0)


def test_each_expert_has_its_own_residual():
    codes = torch.full((2, 1, 32), 2)  # 1.0
    packed, scales = _mxfp4(codes, torch.tensor([[[-30]], [[40]]]))
    w, r = fp8.fold_mxfp4(packed, scales)
    assert r.tolist() == [-36, 34]
    assert torch.equal(fp8.unfold(w, r), mxfp4.dequantize(packed, scales).to(torch.float64))


@pytest.mark.parametrize("bad, why", [
    (lambda p, s: (p, s.clone().fill_(255)), "NaN"),
    (lambda p, s: (p, s[..., :1]), "needs scales"),
    (lambda p, s: (p.float(), s), "uint8"),
])
def test_bad_mxfp4_input_is_named(bad, why):
    packed, scales = _random_mxfp4(1, 2, 64, spread=3)
    with pytest.raises(ValueError, match=why):
        fp8.fold_mxfp4(*bad(packed, scales))


def test_per_token_rows_round_within_e4m3_precision():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 300, generator=g, dtype=torch.float64) * torch.tensor([1e-3, 1.0, 30.0, 1e4, 0.0]).view(5, 1)
    q, scale = fp8.quantize_per_token(x)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (5,) and float(scale[4]) == 1.0
    rt = fp8.round_trip_per_token(x)
    amax = x.abs().amax(dim=1, keepdim=True)
    assert torch.all(rt.abs().amax(dim=1, keepdim=True) <= amax * (1 + 1e-6))
    # 3 mantissa bits: half an ulp is 2^-4 relative for normals, 2^-10 * scale absolute below them
    bound = torch.maximum(x.abs() * 2.0 ** -4, scale.double().unsqueeze(1) * 2.0 ** -10)
    assert torch.all((rt - x).abs() <= bound * (1 + 1e-6))
    assert torch.all(rt[4] == 0)


def test_a_row_whose_scale_is_exact_rounds_its_ties_to_even():
    # amax 10.5 (1.3125 * 2^3): the scale 10.5 / 448 = 1.5 * 2^-6 is exact, so bf16 elements land on
    # e4m3 ties.  torch's CUDA division by a Python number (a multiplication by 1/448) made it one ulp
    # larger, and 76 * scale then rounded down to 72 instead of to even 80.
    scale = 1.5 * 2 ** -6
    x = torch.tensor([[10.5, 76 * scale, 68 * scale, -76 * scale]], dtype=torch.bfloat16)
    q, got_scale = fp8.quantize_per_token(x)
    assert float(got_scale[0]) == scale
    assert q.to(torch.float32).tolist() == [[448.0, 80.0, 64.0, -80.0]]


def test_reference_fp8_mode_quantizes_both_activations():
    spec = load_model("qwen3-30b-a3b").with_parallel(ep_size=16, ep_rank=0)  # 8 local experts
    g = torch.Generator().manual_seed(2)
    T, H, I, E = 3, spec.hidden_size, spec.local_intermediate, spec.local_experts
    hidden = torch.randn(T, H, generator=g, dtype=torch.float64)
    w13 = torch.randn(E, 2 * I, H, generator=g, dtype=torch.float64) / H ** 0.5
    w2 = torch.randn(E, H, I, generator=g, dtype=torch.float64) / I ** 0.5
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7]] * T)
    weights = torch.rand(T, spec.top_k, generator=g, dtype=torch.float64)
    got = reference.moe(spec, hidden, ids, weights, w13, w2, activation_format="fp8")
    expect = torch.zeros(T, H, dtype=torch.float64)
    x = fp8.round_trip_per_token(hidden)
    for t in range(T):
        for k, e in enumerate(ids[t].tolist()):
            gu = w13[e] @ x[t]
            h = reference.activation(spec, gu[:I], gu[I:])
            # the SM90 GEMM1 writes h in bf16 before it is quantized per row
            expect[t] += weights[t, k] * (w2[e] @ fp8.round_trip_per_token(h.to(torch.bfloat16)))
    torch.testing.assert_close(got, expect, rtol=1e-12, atol=1e-12)
    exact = reference.moe(spec, hidden, ids, weights, w13, w2)
    err = float((got - exact).norm() / exact.norm())
    assert 5e-3 < err < 6e-2  # e4m3 activations: a few percent, far above bf16's 2e-3


def _e4m3(byte: int) -> float:
    return float(torch.tensor([byte], dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float64))


def test_an_e2m1_code_placed_into_an_e4m3_byte_is_its_value_times_2_to_the_minus_6():
    for code in range(16):
        sign, e, m = code >> 3, (code >> 1) & 3, code & 1
        byte = sign << 7 | e << 3 | m << 2
        assert _e4m3(byte) == float(mxfp4.E2M1_VALUES[code]) * 2.0 ** -6, code


def test_the_exponent_add_folds_codes_from_one_up_when_d_is_at_least_minus_6():
    normal = set()
    for d in range(fp8.EXACT_MIN_D, fp8.FOLD_HEADROOM + 1):
        for code in range(2, 8):  # 1.0 ... 6.0
            e, m = code >> 1, code & 1
            exponent = e + d + 6
            if 1 <= exponent <= 15:  # the add leaves a normal e4m3 byte: it must be the folded value
                assert _e4m3(exponent << 3 | m << 2) == float(mxfp4.E2M1_VALUES[code]) * 2.0 ** d, (d, code)
                normal.add((d, code))
    assert {(d, c) for d in range(-6, 7) for c in range(2, 8)} <= normal
    assert (-7, 2) not in normal and (-7, 3) not in normal  # 1.0, 1.5 at d = -7: the table's


def test_the_widening_table_holds_every_binades_folded_magnitudes():
    table = fp8.widening_table()
    assert table.shape == (fp8.TABLE_ENTRIES, 8) and table.dtype == torch.uint8
    for i in range(fp8.TABLE_ENTRIES):
        d = i + fp8.TABLE_MIN_D
        codes = torch.arange(8).repeat(4).view(1, 1, 32)  # one group of every magnitude
        packed, scales = _mxfp4(codes, torch.full((1, 1, 1), d))
        # the group's own exponent is its expert's top here: fold it one group deeper via a second row
        top = torch.full((1, 1, 32), 7)
        packed2, scales2 = _mxfp4(torch.cat((codes, top), 1), torch.tensor([[[d], [fp8.FOLD_HEADROOM]]]))
        w, r = fp8.fold_mxfp4(packed2, scales2)
        assert int(r[0]) == 0
        assert torch.equal(w[0, 0, :8].view(torch.uint8), table[i]), d
    assert torch.all(table[0] == 0)  # TABLE_MIN_D: every magnitude rounds to zero
    assert table[1].any()


def _byte_perm(x: torch.Tensor, y: torch.Tensor, selector: torch.Tensor) -> torch.Tensor:
    """CUDA's __byte_perm(x, y, s) for selector nibbles 0-7 (their bit 3 clear)."""
    pool = torch.stack([(x >> (8 * i)) & 0xFF for i in range(4)] + [(y >> (8 * i)) & 0xFF for i in range(4)], -1)
    out = torch.zeros_like(x)
    for i in range(4):
        nibble = (selector >> (4 * i)) & 0xF
        assert int((nibble & 8).max()) == 0
        out |= torch.gather(pool, -1, nibble.unsqueeze(-1)).squeeze(-1) << (8 * i)
    return out


def _kernel_widening(w: torch.Tensor, scales: torch.Tensor, expert_scale: torch.Tensor) -> torch.Tensor:
    """The W4A8 kernel's view of prepared atoms, step for step (mxfp4_convert.cuh, e2m1x8_to_e4m3x8;
    grouped_gemm.cuh, convert): float64 [E, Npad, Kpad].  Register j of a k32 step holds row
    g + 8 (j % 2), k = 4 t + byte + 16 (j // 2): CuTe's ALayout_64x32 (mma_traits_sm90_gmma.hpp)."""
    E, n64, k64, _ = w.shape
    table = fp8.widening_table().to(torch.int64)
    table_x = sum(table[:, i] << (8 * i) for i in range(4))
    table_y = sum(table[:, 4 + i] << (8 * i) for i in range(4))
    words = w.view(E, n64, k64, 128, 4, 4).to(torch.int64)
    words = sum(words[..., i] << (8 * i) for i in range(4))  # [E, n64, k64, thread, word]
    out = torch.zeros(E, n64 * 64, k64 * 64, dtype=torch.float64)
    for L in range(128):
        warp, g, t = L // 32, (L % 32) // 4, L % 4
        for kk in range(4):
            q = words[..., L, kk]
            index = scales[..., 32 * warp + 4 * g + kk].to(torch.int64)
            magnitudes = q & 0x77777777
            lo = _byte_perm(table_x[index], table_y[index], magnitudes & 0xFFFF) | ((q << 4) & 0x80808080)
            hi = _byte_perm(table_x[index], table_y[index], magnitudes >> 16) | (q & 0x80808080)
            for reg, value in ((kk % 2, lo), (kk % 2 + 2, hi)):
                row = 16 * warp + g + 8 * (reg % 2)
                for byte in range(4):
                    k = 32 * (kk // 2) + 4 * t + byte + 16 * (reg // 2)
                    b = ((value >> (8 * byte)) & 0xFF).to(torch.uint8)
                    v = b.view(torch.float8_e4m3fn).to(torch.float64)  # [E, n64, k64]
                    out.view(E, n64, 64, k64, 64)[:, :, row, :, k] = v
    return out * expert_scale.to(torch.float64).view(E, 1, 1)


@pytest.mark.parametrize("gate_up", [None, 64])
def test_the_kernels_table_widening_of_prepared_atoms_is_the_fold(gate_up):
    from moegen.prepare import _interleave_gate_up, pack_sm90_e4m3
    E, N, K = 2, 128, 160  # K pads to 256
    g = torch.Generator().manual_seed(5)
    codes = torch.randint(0, 16, (E, N, K), generator=g)
    exps = torch.randint(-16, 4, (E, N, K // 32), generator=g)  # spans the table's clamp and inexact groups
    packed, scales = _mxfp4(codes, exps)
    w, s, escale = pack_sm90_e4m3(codes.to(torch.uint8), scales, gate_up=gate_up)
    assert w.shape == (E, 2, 4, 2048) and s.shape == (E, 2, 4, 128)
    got = _kernel_widening(w, s, escale)
    rows_packed, rows_scales = packed, scales
    if gate_up is not None:
        rows_packed, rows_scales = _interleave_gate_up(packed, gate_up), _interleave_gate_up(scales, gate_up)
    want = fp8.unfold(*fp8.fold_mxfp4(rows_packed, rows_scales))
    assert fp8.fold_report(scales)["inexact"] > 0
    assert torch.equal(got[:, :N, :K], want)
    assert torch.all(got[:, :, K:] == 0)


def test_w4a8_tolerance_widens_below_16_rows_only():
    from moegen.testing import TOLERANCE, tolerance
    assert tolerance("fp8", 16) == tolerance("fp8", 4096) == TOLERANCE["fp8"]
    assert tolerance("fp8", 1) == pytest.approx(4 * TOLERANCE["fp8"])
    assert tolerance("fp8", 4) == pytest.approx(2 * TOLERANCE["fp8"])
    assert [tolerance("fp8", r) for r in range(1, 17)] == sorted((tolerance("fp8", r) for r in range(1, 17)), reverse=True)
    assert tolerance("bf16", 1) == TOLERANCE["bf16"]
    assert tolerance("mxfp8", 1) == pytest.approx(4 * TOLERANCE["mxfp8"]) and tolerance("mxfp8", 16) == TOLERANCE["mxfp8"]
