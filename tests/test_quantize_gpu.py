"""The arch-neutral quantizers (moegen/quantize.cuh) on the local GPU, bit for bit: the SM100
layer's MXFP8 one against moegen.mxfp8, with the per-expert block-scaled scale layout the SM100
GEMMs read, and W4A8's per-row e4m3 ones against moegen.fp8.quantize_per_token, however a row's
work is split (marker gpu; the quantizers run on any GPU, so the H200 tests them)."""
import ctypes
import os
import subprocess

import pytest
import torch

from moegen.fp8 import quantize_per_token
from moegen.layout import sf_offset
from moegen.mxfp8 import quantize_mxfp8
from moegen.render import INCLUDE_DIR

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

HARNESS = os.path.join(os.path.dirname(__file__), "helpers", "quantize_harness.cu")
SEED = int(os.environ["MOEGEN_TEST_SEED"])  # tests/conftest.py draws it and prints it in the header


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    from moegen.build import find_toolchain
    tc = find_toolchain()
    major, minor = torch.cuda.get_device_capability()
    lib = tmp_path_factory.mktemp("harness") / "quantize_harness.so"
    run = subprocess.run([tc.nvcc, "-std=c++17", "-O3", "-shared", "-Xcompiler=-fPIC", f"-arch=sm_{major}{minor}",
                          f"-I{INCLUDE_DIR}", *(f"-L{d}" for d in tc.lib_dirs), HARNESS, "-o", str(lib)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    dll = ctypes.CDLL(str(lib))
    dll.moegen_test_quantize.restype = ctypes.c_int
    dll.moegen_test_quantize_e4m3.restype = ctypes.c_int
    dll.moegen_test_sf_rows.restype = ctypes.c_int
    return dll


@pytest.mark.parametrize("groups", [48, 256])
def test_scale_rows_past_one_warp_of_experts(harness, groups):
    """Each expert's first scale row: its rows' prefix sum with every count rounded up to 128 (DeepSeek's
    256 local experts take eight passes of the warp; 48 ends on a partial one)."""
    g = torch.Generator().manual_seed(SEED + groups)
    counts = torch.randint(0, 300, (groups,), generator=g)
    counts[::7] = 0
    offsets = torch.cat((torch.zeros(1, dtype=torch.int64), counts.cumsum(0))).to(torch.int32).cuda()
    sf_rows = torch.full((groups + 1,), -1, dtype=torch.int32, device="cuda")
    assert harness.moegen_test_sf_rows(groups, ctypes.c_void_p(offsets.data_ptr()), ctypes.c_void_p(sf_rows.data_ptr())) == 0
    padded = (counts + 127) // 128 * 128
    assert torch.equal(sf_rows.cpu(), torch.cat((torch.zeros(1, dtype=torch.int64), padded.cumsum(0))).to(torch.int32))


@pytest.mark.parametrize("k", [256, 2880, 2048])
def test_quantizer_matches_python_bit_for_bit(harness, k):
    print(f"seed {SEED}")
    g = torch.Generator().manual_seed(SEED + k)
    counts = torch.tensor([0, 5, 130, 1, 0, 257, 33, 2])  # empty experts, one past 128, one past 256
    rows = int(counts.sum())
    offsets = torch.cat((torch.zeros(1, dtype=torch.int64), counts.cumsum(0))).to(torch.int32)
    x = torch.randn(rows, k, generator=g) * torch.exp2(torch.randint(-20, 20, (rows, 1), generator=g).float())
    x[0, :32] = 0  # an all-zero block
    x[1, 32:64] = torch.tensor([448.0 * 1.8] + [1.0] * 31)  # m > 1.75: the exponent steps up
    x = x.to(torch.bfloat16)
    k_pad = -(-k // 128) * 128
    kbs = k_pad // 32
    padded = int(((counts + 127) // 128 * 128).sum())
    q = torch.full((rows, k_pad), 0xAA, dtype=torch.uint8, device="cuda")
    sf = torch.full((padded * kbs,), 0xAA, dtype=torch.uint8, device="cuda")
    sf_rows = torch.full((9,), -1, dtype=torch.int32, device="cuda")
    xd, off = x.cuda(), offsets.cuda()
    rc = harness.moegen_test_quantize(ctypes.c_void_p(xd.data_ptr()), rows, k, k_pad, ctypes.c_void_p(off.data_ptr()),
                                      ctypes.c_void_p(sf_rows.data_ptr()), ctypes.c_void_p(q.data_ptr()),
                                      ctypes.c_void_p(sf.data_ptr()))
    assert rc == 0
    want_q, want_s = quantize_mxfp8(torch.nn.functional.pad(x.float(), (0, k_pad - k)))
    assert torch.equal(q.cpu(), want_q.view(torch.uint8))
    padded_counts = (counts + 127) // 128 * 128
    want_rows = torch.cat((torch.zeros(1, dtype=torch.int64), padded_counts.cumsum(0))).to(torch.int32)
    assert torch.equal(sf_rows.cpu(), want_rows)
    sf = sf.cpu()
    for e in range(8):
        base = int(want_rows[e]) * kbs
        for j in range(int(padded_counts[e])):
            r = int(offsets[e]) + j
            for kb in range(kbs):
                want = int(want_s[r, kb]) if j < int(counts[e]) else 0
                assert int(sf[base + sf_offset(j, kb, k_pad)]) == want, (e, j, kb)


# (mode, rows, first_warp): a block per row; one block's warps [first_warp, 32) sharing the rows (the
# one-block routing kernel's warps past the routing ones on 1-8 rows, and the other ways the shared
# function splits: several warps per row, one each, all 32); the many-block routing's quantizer blocks
# (two rows of four warps, and a last block with one row).
E4M3_SPLITS = [(0, 37, 0), (1, 1, 1), (1, 2, 2), (1, 5, 5), (1, 8, 8), (1, 16, 16), (1, 32, 0), (2, 37, 0)]


@pytest.mark.parametrize("k", [768, 1440, 2048, 2880, 4096, 7168])  # every shipped H and I
@pytest.mark.parametrize("mode,rows,first_warp", E4M3_SPLITS)
def test_e4m3_row_quantizers_match_python_bit_for_bit(harness, k, mode, rows, first_warp):
    print(f"seed {SEED}")
    g = torch.Generator().manual_seed(SEED + 7 * k + 131 * mode + rows)
    x = torch.randn(rows, k, generator=g) * torch.exp2(torch.randint(-20, 20, (rows, 1), generator=g).float())
    x[0] = 0  # an all-zero row: scale 1
    if rows > 1:
        x[1, k // 2] = 1e4 * float(x[1].abs().max())  # one outlier: the rest of the row rounds to few steps
    x = x.to(torch.bfloat16)
    live = rows - 7 if mode == 0 else rows  # a block per row skips rows past a device count
    q = torch.full((rows, k), 0xAA, dtype=torch.uint8, device="cuda")
    scale = torch.full((rows,), float("nan"), dtype=torch.float32, device="cuda")
    live_rows = torch.tensor([live], dtype=torch.int32, device="cuda")
    xd = x.cuda()
    rc = harness.moegen_test_quantize_e4m3(ctypes.c_void_p(xd.data_ptr()), rows, k,
                                           ctypes.c_void_p(live_rows.data_ptr() if mode == 0 else 0), mode,
                                           first_warp, ctypes.c_void_p(q.data_ptr()), ctypes.c_void_p(scale.data_ptr()))
    assert rc == 0
    want_q, want_s = quantize_per_token(x[:live])
    assert torch.equal(q[:live].cpu(), want_q.view(torch.uint8))
    assert torch.equal(scale[:live].cpu(), want_s)
    # The GPU tests, `moegen check` and the tuner run the reference's quantizer on CUDA tensors.
    cuda_q, cuda_s = quantize_per_token(xd[:live])
    assert torch.equal(cuda_q.cpu().view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(cuda_s.cpu(), want_s)
    assert bool((q[live:] == 0xAA).all()) and bool(scale[live:].isnan().all()), "rows past live_rows were written"
