"""MXFP4 (OCP MX v1.0) quantize/dequantize: hand-worked bytes, rounding, saturation, layout, errors."""
import math

import pytest
import torch

from moegen.mxfp4 import E2M1_VALUES, dequantize, quantize


def block(*values):
    """One 32-element float32 block: the given values, then zeros."""
    return torch.tensor(list(values) + [0.0] * (32 - len(values)), dtype=torch.float32)


def packed_bytes(*byte_values):
    """A block's 16 packed bytes: the given ones, then zeros."""
    return torch.tensor(list(byte_values) + [0] * (16 - len(byte_values)), dtype=torch.uint8)


def test_e2m1_values():
    assert E2M1_VALUES.dtype == torch.float32
    assert E2M1_VALUES[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert E2M1_VALUES[8:].tolist() == [-0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert math.copysign(1, E2M1_VALUES[8].item()) == -1  # code 8 is -0.0


def test_amax_six_exact_codes_and_nibble_order():
    # amax 6: floor(log2 6) = 2, shared_exp = 2 - 2 = 0, e8m0 = 127; elements are unscaled.
    # codes: 6 -> 7, -6 -> 8|7 = 15, 0.5 -> 1, 1.5 -> 3, 3 -> 5, -4 -> 8|6 = 14, 1 -> 2, 2 -> 4
    # byte i = code(2i) | code(2i+1) << 4: 0xF7, 0x31, 0xE5, 0x42
    packed, scales = quantize(block(6, -6, 0.5, 1.5, 3, -4, 1, 2))
    assert scales.tolist() == [127]
    assert packed.tolist() == packed_bytes(0xF7, 0x31, 0xE5, 0x42).tolist()


def test_amax_one():
    # amax 1: floor(log2 1) = 0, shared_exp = -2, e8m0 = 125; elements are multiplied by 4.
    # 1 -> 4 (code 6), 0.25 -> 1 (code 2), 0.125 -> 0.5 (code 1), -0.5 -> -2 (8|4 = 12)
    # bytes: 2 << 4 | 6 = 0x26, 12 << 4 | 1 = 0xC1
    packed, scales = quantize(block(1.0, 0.25, 0.125, -0.5))
    assert scales.tolist() == [125]
    assert packed.tolist() == packed_bytes(0x26, 0xC1).tolist()


def test_ties_round_to_even_mantissa():
    # amax 6 -> shared_exp 0. Ties go to the neighbour with the even mantissa bit:
    # 0.25 -> 0 (code 0), 0.75 -> 1 (2), 1.25 -> 1 (2), 1.75 -> 2 (4), 2.5 -> 2 (4), 3.5 -> 4 (6),
    # 5 -> 4 (6), 6 (7); -0.25 -> -0 (8), -2.5 -> -2 (12)
    packed, scales = quantize(block(0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6, -0.25, -2.5))
    assert scales.tolist() == [127]
    # bytes: 2<<4|0 = 0x20, 4<<4|2 = 0x42, 6<<4|4 = 0x64, 7<<4|6 = 0x76, 12<<4|8 = 0xC8
    assert packed.tolist() == packed_bytes(0x20, 0x42, 0x64, 0x76, 0xC8).tolist()
    assert dequantize(packed, scales)[:10].tolist() == [0, 1, 1, 2, 2, 4, 4, 6, -0.0, -2]


def test_non_ties_round_to_nearest():
    # shared_exp 0: 0.3 -> 0.5 (1), 2.9 -> 3 (5), 4.9 -> 4 (6), 5.1 -> 6 (7)
    packed, scales = quantize(block(0.3, 2.9, 4.9, 5.1))
    assert scales.tolist() == [127]
    assert packed.tolist() == packed_bytes(0x51, 0x76).tolist()


def test_saturation():
    # amax 13 = 6.5 * 2: floor(log2 13) = 3, shared_exp 1, e8m0 128; 13 / 2 = 6.5 saturates to 6 (code 7),
    # 7.9 / 2 = 3.95 -> 4 (code 6)
    packed, scales = quantize(block(13.0, 7.9))
    assert scales.tolist() == [128]
    assert packed.tolist() == packed_bytes(0x67).tolist()
    assert dequantize(packed, scales)[:2].tolist() == [12.0, 8.0]
    # amax 7.75: shared_exp 0, 7.75 saturates to 6 rather than rounding to 8; -7 also to -6 (15)
    packed, scales = quantize(block(7.75, -7.0))
    assert scales.tolist() == [127]
    assert packed.tolist() == packed_bytes(0xF7).tolist()


def test_exponent_exact_at_powers_of_two():
    below_four = torch.nextafter(torch.tensor(4.0), torch.tensor(0.0)).item()
    # amax 4 = 2^2 -> shared_exp 0; just below 4 -> floor(log2) = 1, shared_exp -1, e8m0 126,
    # and 3.99999976 * 2 = 7.9999995 saturates to 6 (dequantizes to 3)
    _, s = quantize(block(4.0))
    assert s.tolist() == [127]
    packed, s = quantize(block(below_four))
    assert s.tolist() == [126]
    assert dequantize(packed, s)[0].item() == 3.0
    # amax 2^-100 -> shared_exp -102, e8m0 25, element scaled to 4 (code 6)
    packed, s = quantize(block(2.0 ** -100))
    assert s.tolist() == [25] and packed[0].item() == 6
    # amax 2^-130 -> shared_exp clamps at -127 (e8m0 0); 2^-130 * 2^127 = 0.125 rounds to 0
    packed, s = quantize(block(2.0 ** -130))
    assert s.tolist() == [0] and packed[0].item() == 0


def test_all_zero_block():
    packed, scales = quantize(torch.zeros(2, 64))
    assert scales.tolist() == [[0, 0], [0, 0]]
    assert packed.eq(0).all()
    assert dequantize(packed, scales).eq(0).all()


def test_shapes_and_blocks_independent():
    x = torch.zeros(2, 3, 64)
    x[1, 2, 32] = 6.0  # second block of the last row only
    x[0, 0, 1] = 1.0
    packed, scales = quantize(x)
    assert packed.shape == (2, 3, 32) and packed.dtype == torch.uint8
    assert scales.shape == (2, 3, 2) and scales.dtype == torch.uint8
    assert scales[1, 2].tolist() == [0, 127]
    assert scales[0, 0].tolist() == [125, 0]
    assert packed[0, 0, 0].item() == 0x60  # element 1 (value 1 * 4 -> code 6) in the high nibble
    assert packed[1, 2, 16].item() == 0x07  # element 32 in the low nibble of byte 16
    assert torch.equal(dequantize(packed, scales), x)


def test_empty_batch():
    packed, scales = quantize(torch.zeros(0, 64))
    assert packed.shape == (0, 32) and scales.shape == (0, 2)
    assert dequantize(packed, scales).shape == (0, 64)


def test_input_dtypes():
    x = block(6, -3, 0.5).reshape(1, 32)
    expected = quantize(x)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        got = quantize(x.to(dtype))
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_round_trip_on_grid():
    # Values on the grid whose block amax is 4 or 6 times 2^s re-quantize to the same bytes.
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (8, 4, 32), generator=g, dtype=torch.uint8)
    codes[..., 0] = torch.tensor([6, 7, 14, 15], dtype=torch.uint8)[torch.randint(0, 4, (8, 4), generator=g)]
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).reshape(8, 64)
    scales = torch.randint(0, 253, (8, 4), generator=g, dtype=torch.uint8)
    x = dequantize(packed, scales)
    assert torch.isfinite(x).all()
    p2, s2 = quantize(x)
    assert torch.equal(s2, scales) and torch.equal(p2, packed)
    assert torch.equal(dequantize(p2, s2), x)


def test_gaussian_relative_error():
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(1))
    y = dequantize(*quantize(x))
    rel = ((y - x).norm() / x.norm()).item()
    assert 0 < rel < 0.25


def test_dequantize_nan_scale():
    packed = packed_bytes(0x21).reshape(1, 16).repeat(1, 2)
    out = dequantize(packed, torch.tensor([[255, 127]], dtype=torch.uint8))
    assert out[0, :32].isnan().all()
    assert out[0, 32:34].tolist() == [0.5, 1.0]


def test_dequantize_scale_extremes():
    packed = packed_bytes(0x01).reshape(1, 16).repeat(1, 2)  # element 0 = 0.5
    out = dequantize(packed, torch.tensor([[0, 254]], dtype=torch.uint8))
    assert out[0, 0].item() == 2.0 ** -128  # 0.5 * 2^-127, a float32 subnormal
    assert out[0, 32].item() == 2.0 ** 126  # 0.5 * 2^127


def test_quantize_errors():
    with pytest.raises(ValueError, match="K=48"):
        quantize(torch.zeros(2, 48))
    with pytest.raises(ValueError, match="non-finite"):
        quantize(block(1.0, math.nan))
    with pytest.raises(ValueError, match="non-finite"):
        quantize(block(math.inf))
    with pytest.raises(ValueError, match="floating-point"):
        quantize(torch.zeros(32, dtype=torch.int32))


def test_dequantize_errors():
    with pytest.raises(ValueError, match="uint8"):
        dequantize(torch.zeros(16, dtype=torch.int32), torch.zeros(1, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"scales shape \(2, 2\)"):
        dequantize(torch.zeros(2, 32, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="multiple of 16"):
        dequantize(torch.zeros(24, dtype=torch.uint8), torch.zeros(1, dtype=torch.uint8))


def test_quantize_float8_and_meta_inputs():
    from moegen.mxfp4 import dequantize, quantize
    x = (torch.randn(4, 64) * 3).to(torch.float8_e4m3fn)
    packed, scales = quantize(x)
    assert torch.equal(packed, quantize(x.float())[0]) and torch.equal(scales, quantize(x.float())[1])
    assert dequantize(packed, scales).shape == (4, 64)
    with pytest.raises(ValueError, match="quantize: got a meta tensor"):
        quantize(torch.empty(2, 32, device="meta"))
