"""The SM100 weight layout against CUTLASS's own layout function, compiled for the host (marker nvcc):
every scale of an operand lands where the tensor cores will read it."""
import subprocess
from pathlib import Path

import pytest
import torch

from moegen.layout import SM100_BLOCK_SCALED, sf_bytes, sf_offset
from moegen.prepare import pack_sm100

pytestmark = pytest.mark.nvcc

PROBE = Path(__file__).parent / "helpers" / "sf_layout_probe.cu"


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    from moegen.build import BuildError, find_toolchain
    try:
        tc = find_toolchain()
    except BuildError as e:
        pytest.skip(str(e))
    exe = tmp_path_factory.mktemp("probe") / "sf_layout_probe"
    run = subprocess.run([tc.nvcc, "-std=c++17", "--expt-relaxed-constexpr", f"-I{tc.cutlass_include}",
                          *(f"-L{d}" for d in tc.lib_dirs), str(PROBE), "-o", str(exe)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return exe


def cutlass_offsets(exe, M, K):
    out = subprocess.run([str(exe), str(M), str(K)], capture_output=True, text=True, check=True).stdout.splitlines()
    size_a, size_b = map(int, out[0].split()[1:])
    rows = [tuple(map(int, line.split())) for line in out[1:]]
    return size_a, size_b, rows


@pytest.mark.parametrize("M, K", [(1, 128), (7, 256), (128, 128), (130, 384), (300, 2944), (256, 4096)])
def test_sf_offsets_match_cutlass(probe, M, K):
    size_a, size_b, rows = cutlass_offsets(probe, M, K)
    assert size_a == size_b == sf_bytes(M, K)
    for m, kb, off_a, off_b in rows:
        assert off_a == off_b == sf_offset(m, kb, K), (m, kb)


def test_pack_sm100_places_values_and_scales(probe):
    E, N, K = 2, 200, 2880  # gpt-oss's K: padded to 2944; 200 rows: padded to 256
    g = torch.Generator().manual_seed(3)
    codes = torch.randint(0, 16, (E, N, K), generator=g, dtype=torch.int32).to(torch.uint8)
    e8m0 = torch.randint(100, 140, (E, N, K // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    w, scales, expert_scale = pack_sm100(codes, e8m0)
    Np, Kp = SM100_BLOCK_SCALED.padded(N, K)
    assert (Np, Kp) == (256, 2944)
    assert w.shape == (E, Np, Kp // 2) and scales.shape == (E, sf_bytes(Np, Kp)) and torch.equal(expert_scale, torch.ones(E))
    assert torch.equal(w[:, :N, : K // 2] & 0xF, codes[..., 0::2]) and torch.equal(w[:, :N, : K // 2] >> 4, codes[..., 1::2])
    assert not w[:, N:].any() and not w[:, :, K // 2:].any()
    _, _, rows = cutlass_offsets(probe, Np, Kp)
    for e in range(E):
        for m, kb, off, _ in rows:
            want = int(e8m0[e, m, kb]) if m < N and kb < K // 32 else 0
            assert int(scales[e, off]) == want, (e, m, kb)
