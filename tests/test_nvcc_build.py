"""Real nvcc builds of a tiny layer (marker `nvcc`; no GPU needed: the library loads with ctypes on the CPU).

One module-scoped build (~1 min on 2 cores) serves every test here but the compile-failure one.
"""
import ctypes
import json
import re
import shutil
import time
from types import SimpleNamespace

import pytest
import torch

from moegen import build, render, runtime
from moegen.build import BuildError, file_sha256, ptxas_resources
from moegen.config_space import KernelConfig
from moegen.spec import model_from_dict

pytestmark = pytest.mark.nvcc


def _have_nvcc() -> bool:
    if shutil.which("nvcc"):
        return True
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
        return bool(find_nvidia_binary_utility("nvcc"))
    except Exception:
        return False


if not _have_nvcc():
    pytest.skip("nvcc not found (PATH or cuda.pathfinder)", allow_module_level=True)

TINY_DICT = {"name": "tiny", "num_experts": 8, "hidden_size": 256, "intermediate_size": 128,
             "router": {"kind": "softmax_topk", "top_k": 2}, "activation": {"kind": "swiglu"}}
TINY = model_from_dict(TINY_DICT, "tiny.yaml")
CONFIGS = [KernelConfig("sm90", "gemm1", 64, 16, 64, 3), KernelConfig("sm90", "gemm2", 64, 16, 64, 3)]
NAMES = [c.name for c in CONFIGS]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("generated")
    logs = []
    t0 = time.monotonic()
    result = build.build(TINY, "sm90", CONFIGS, root, jobs=2, log=logs.append)
    seconds = time.monotonic() - t0
    out = root / "tiny" / "sm90"
    manifest = json.loads((out / "manifest.json").read_text())
    return SimpleNamespace(root=root, out=out, result=result, logs=logs, seconds=seconds, manifest=manifest)


@pytest.fixture(scope="module")
def dll(built):
    d = ctypes.CDLL(str(built.out / built.manifest["library"]))
    d.moegen_abi_version.restype = ctypes.c_int
    d.moegen_num_kernels.restype = ctypes.c_int
    d.moegen_kernel_name.argtypes = [ctypes.c_int]
    d.moegen_kernel_name.restype = ctypes.c_char_p
    d.moegen_build_info.restype = ctypes.c_char_p
    d.moegen_workspace_bytes.argtypes = [ctypes.c_int32]
    d.moegen_workspace_bytes.restype = ctypes.c_size_t
    return d


def test_build_result(built):
    r = built.result
    assert r.plan.out_dir == built.out
    assert not r.up_to_date
    assert sorted(r.compiled) == sorted(NAMES + ["layer"])
    assert r.reused == []
    assert any("compiling 3 translation unit(s)" in m for m in built.logs)
    print(f"\ntiny build: {built.seconds:.1f} s")


def test_manifest(built):
    m, out = built.manifest, built.out
    assert m["fingerprint"] == built.result.plan.fingerprint
    assert m["library"] == built.result.plan.library and (out / m["library"]).is_file()
    assert m["library_sha256"] == file_sha256(out / m["library"])
    assert [k["name"] for k in m["kernels"]] == NAMES
    assert m["kernels"][0] == dict(name=NAMES[0], gemm="gemm1", block_m=64, block_n=16, block_k=64, stages=3)
    assert m["toolchain"]["nvcc"].startswith("V") and m["toolchain"]["cutlass"].count(".") == 2
    assert "-gencode=arch=compute_90a,code=sm_90a" in m["toolchain"]["flags"]
    assert m["spec"] == TINY.to_dict() and m["variant"] == "tiny" and m["arch"] == "sm90"
    assert m["abi_version"] == build.ABI_VERSION and m["schema"] == build.MANIFEST_SCHEMA
    assert set(m["resources"]) == set(NAMES + ["layer"])
    # Only the fingerprinted library; temp files renamed away.
    assert [p.name for p in out.glob("libmoegen-*.so")] == [m["library"]]
    assert not list(out.rglob(".*tmp*"))
    assert sorted(p.name for p in (out / "src").iterdir()) == sorted(
        [f"{n}.cu" for n in NAMES] + ["layer.cu", "problem.h", "include"])
    # the header snapshot the objects were compiled from
    assert (out / "src" / "include" / "moegen" / "sm90_mxfp4_grouped_gemm.cuh").read_text() == \
        (render.INCLUDE_DIR / "moegen" / "sm90_mxfp4_grouped_gemm.cuh").read_text()


def test_library_c_abi(built, dll):
    assert dll.moegen_abi_version() == 1
    assert dll.moegen_num_kernels() == 2
    assert [dll.moegen_kernel_name(i).decode() for i in range(2)] == NAMES
    assert dll.moegen_kernel_name(2) is None and dll.moegen_kernel_name(-1) is None
    info = json.loads(dll.moegen_build_info().decode())
    assert info["fingerprint"] == built.manifest["fingerprint"]
    assert info["kernels"] == NAMES and info["spec"] == TINY.to_dict() and info["abi_version"] == 1


def test_workspace_bytes(dll):
    sizes = [dll.moegen_workspace_bytes(t) for t in (0, 1, 16, 1024, 65536)]
    assert sizes[0] > 0
    assert all(a < b for a, b in zip(sizes, sizes[1:]))
    assert all(s % 256 == 0 for s in sizes)


def test_gemm_kernels_neither_spill_nor_serialize_wgmma(built):
    for name in NAMES:
        text = (built.out / "logs" / f"{name}.log").read_text()
        assert "bytes spill stores" in text, text[-2000:]
        res = ptxas_resources(text)
        assert res["max_registers"] > 0
        assert res["spill_bytes"] == 0, text[-2000:]
        assert res["wgmma_serialized"] == 0, text[-2000:]
        assert built.manifest["resources"][name] == res


def test_second_build_is_up_to_date(built):
    lib = built.out / built.manifest["library"]
    mtime = lib.stat().st_mtime_ns
    logs = []
    again = build.build(TINY, "sm90", CONFIGS, built.root, jobs=2, log=logs.append)
    assert again.up_to_date
    assert again.compiled == []
    assert sorted(again.reused) == sorted(NAMES + ["layer"])
    assert again.plan.fingerprint == built.manifest["fingerprint"]
    assert lib.stat().st_mtime_ns == mtime
    assert json.loads((built.out / "manifest.json").read_text()) == built.manifest
    assert any("up to date" in m for m in logs)


# --- runtime.load checks, on copies of the build -----------------------------------------------------------

@pytest.fixture
def copy(built, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(built.out, dst)
    return dst


def test_load_rejects_corrupted_library(copy, built):
    lib = copy / built.manifest["library"]
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    with pytest.raises(runtime.LoadError, match="stale library"):
        runtime.load(copy)


def test_load_without_manifest(copy):
    (copy / "manifest.json").unlink()
    with pytest.raises(runtime.LoadError, match="run `moegen build` first"):
        runtime.load(copy)


def test_load_without_library(copy, built):
    (copy / built.manifest["library"]).unlink()
    with pytest.raises(runtime.LoadError, match="library named by the manifest is missing"):
        runtime.load(copy)


@pytest.mark.parametrize("change, field, built_value, given_value", [
    (dict(hidden_size=512), "hidden_size", "256", "512"),
    (dict(num_experts=16), "num_experts", "8", "16"),
    (dict(parallel={"tp_size": 2}), "parallel", "'tp_size': 1", "'tp_size': 2"),
])
def test_load_rejects_other_spec(copy, change, field, built_value, given_value):
    other = model_from_dict(dict(TINY_DICT, **change))
    with pytest.raises(runtime.LoadError) as excinfo:
        runtime.load(copy, spec=other)
    msg = str(excinfo.value)
    m = re.search(r"differs at '(\w+)': built (.*), given (.*); rebuild for this spec$", msg)
    assert m, msg
    assert m[1] == field and built_value in m[2] and given_value in m[3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_load_without_gpu(built):
    with pytest.raises(runtime.LoadError, match="no CUDA GPU"):
        runtime.load(built.out)
    with pytest.raises(runtime.LoadError, match="no CUDA GPU"):
        runtime.load(built.out, spec=TINY)  # the matching spec passes its check


# --- compile failure ---------------------------------------------------------------------------------------

BROKEN = """// deliberately broken by test_nvcc_build
#include "problem.h"
int moegen_deliberately_broken(int x {
  return x;
}
"""


def test_compile_failure_names_kernel(tmp_path, monkeypatch):
    real = render.gemm_source
    broken = CONFIGS[1].name
    monkeypatch.setattr(render, "gemm_source",
                        lambda spec, cfg: BROKEN if cfg.name == broken else real(spec, cfg))
    logs = []
    with pytest.raises(BuildError) as excinfo:
        build.build(TINY, "sm90", CONFIGS, tmp_path, jobs=2, log=logs.append)
    msg = str(excinfo.value)
    out = tmp_path / "tiny" / "sm90"
    assert msg.startswith(f"kernel {broken} failed to compile (1 failure(s) in all)")
    assert CONFIGS[0].name not in msg
    assert str(out / "logs" / f"{broken}.log") in msg
    # The compiler's own words, with the file and line.
    assert f"src/{broken}.cu(3): error" in msg
    assert "expected a \")\"" in msg
    assert "expected a \")\"" in (out / "logs" / f"{broken}.log").read_text()
    # Nothing half-built: no library, no manifest, no object or temp file for the broken kernel.
    assert not (out / "manifest.json").exists()
    assert not list(out.glob("libmoegen-*"))
    assert not list(out.glob(".*"))
    objs = sorted(p.name for p in (out / "obj").iterdir())
    assert not any(o.startswith(broken) or o.startswith(f".{broken}") for o in objs)
    assert any(o.startswith(CONFIGS[0].name) for o in objs)  # the good kernel's object is cached
    assert any(f"{broken}: FAILED" in m for m in logs)
