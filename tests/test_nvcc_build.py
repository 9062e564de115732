"""Real nvcc builds of a tiny layer (marker `nvcc`; no GPU needed: the library loads with ctypes on the CPU).

One module-scoped build (~1 min on 2 cores) serves every test here but the compile-failure one.
"""
import json
import re
import shutil
import time
from types import SimpleNamespace

import pytest
import torch

from moegen import artifact, binding, build, render, runtime
from moegen.artifact import file_sha256
from moegen.build import BuildError, ptxas_resources
from moegen.naming import KernelConfig
from moegen.spec import model_from_dict

pytestmark = pytest.mark.nvcc


def _toolchain_error() -> str | None:
    """Why the build cannot find its toolchain (it looks through cuda-python, not PATH), or None."""
    from moegen.build import find_toolchain
    try:
        find_toolchain()
    except BuildError as e:
        return str(e)
    return None


_NO_TOOLCHAIN = _toolchain_error()
if _NO_TOOLCHAIN is not None:
    pytest.skip(f"no toolchain: {_NO_TOOLCHAIN}", allow_module_level=True)

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
def lib(built):
    return binding.Library(built.out / built.manifest["library"])


def test_build_result(built):
    r = built.result
    assert r.plan.out_dir == built.out
    assert not r.up_to_date
    assert sorted(r.compiled) == sorted(NAMES + ["layer", "build_info"])
    assert r.reused == []
    assert any("compiling 4 translation unit(s)" in m for m in built.logs)
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
    assert m["abi_version"] == artifact.ABI_VERSION and m["schema"] == artifact.MANIFEST_SCHEMA
    assert set(m["resources"]) == set(NAMES + ["layer", "build_info"])
    # Only the fingerprinted library; temp files renamed away.
    assert [p.name for p in out.glob("libmoegen-*.so")] == [m["library"]]
    assert not list(built.root.rglob(".*tmp*"))
    assert sorted(p.name for p in (out / "src").iterdir()) == sorted(
        [f"{n}.cu" for n in NAMES] + ["layer.cu", "build_info.cu", "include"])
    # the header snapshot the objects were compiled from
    assert (out / "src" / "include" / "moegen" / "sm90" / "grouped_gemm.cuh").read_text() == \
        (render.INCLUDE_DIR / "moegen" / "sm90" / "grouped_gemm.cuh").read_text()
    assert sorted(p.name for p in (built.root / ".objects").glob("*.o")) == \
        sorted(f"{fp}.o" for fp in m["objects"].values())


def test_library_c_abi(built, lib):
    """Loads on a machine without a GPU; binding.Library checks the ABI version and that every struct
    is laid out as moegen.binding mirrors it."""
    assert lib.dll.moegen_abi_version() == artifact.ABI_VERSION
    assert lib.kernel_names() == NAMES
    assert lib.dll.moegen_kernel_name(2) is None and lib.dll.moegen_kernel_name(-1) is None
    info = lib.build_info()
    assert info["fingerprint"] == built.manifest["fingerprint"]
    assert info["kernels"] == NAMES and info["spec"] == TINY.to_dict() and info["abi_version"] == artifact.ABI_VERSION
    for name, struct in binding.STRUCTS.items():
        assert lib.dll.moegen_struct_layout(name.encode()).decode() == binding.ctypes_layout(struct)
    assert lib.dll.moegen_struct_layout(b"nope") is None


def test_struct_layout_mismatch_is_a_load_error(built, monkeypatch):
    class Shifted(binding.ctypes.Structure):
        _fields_ = [("num_tokens", binding.ctypes.c_int32)] + binding.Args._fields_[1:]

    monkeypatch.setitem(binding.STRUCTS, "moegen_args", Shifted)
    with pytest.raises(artifact.ArtifactError, match="struct moegen_args is laid out as"):
        binding.Library(built.out / built.manifest["library"])


def test_workspace_bytes(lib):
    sizes = [lib.workspace_bytes(t) for t in (0, 1, 16, 1024, 65536)]
    assert sizes[0] > 0
    assert all(a < b for a, b in zip(sizes, sizes[1:]))
    assert all(s % 256 == 0 for s in sizes)
    # token counts outside [0, max] give 0, never an overflowed size
    assert lib.max_tokens == (2**31 - 1) // 2 // 32  # tiny: hidden 256 -> 32 vectors of 8 per row
    assert lib.workspace_bytes(lib.max_tokens) > 0
    assert lib.workspace_bytes(lib.max_tokens + 1) == 0
    assert lib.workspace_bytes(2**31) == 0 and lib.workspace_bytes(-1) == 0


def test_batched_workspace_is_that_of_the_tokens_covering_its_rows(lib):
    """The batched entry point runs as for min(num_tokens, ceil(E_local x M / top_k)) tokens: the rows a
    dispatch of num_tokens tokens can carry, and no more than its [E_local, M] buffer holds."""
    E, K = TINY.local_experts, TINY.top_k
    assert lib.max_tokens_per_expert == lib.max_tokens // E
    assert lib.workspace_bytes_batched(5, 64) == lib.workspace_bytes(5)
    assert lib.workspace_bytes_batched(10**6, 64) == lib.workspace_bytes(-(-E * 64 // K))
    assert lib.workspace_bytes_batched(0, 0) == lib.workspace_bytes(0)
    for bad in ((-1, 4), (4, -1), (lib.max_tokens + 1, 4), (4, lib.max_tokens_per_expert + 1)):
        assert lib.workspace_bytes_batched(*bad) == 0, bad


def test_gemm_kernels_neither_spill_nor_serialize_wgmma(built):
    for name in NAMES:
        text = (built.out / "logs" / f"{name}.log").read_text()
        assert "bytes spill stores" in text, text[-2000:]
        res = ptxas_resources(text)
        assert res["max_registers"] > 0
        assert res["spill_bytes"] == 0, text[-2000:]
        assert res["stack_bytes"] == 0, text[-2000:]
        assert res["wgmma_serialized"] == 0, text[-2000:]
        assert built.manifest["resources"][name] == res


def test_second_build_is_up_to_date(built):
    lib = built.out / built.manifest["library"]
    mtime = lib.stat().st_mtime_ns
    logs = []
    again = build.build(TINY, "sm90", CONFIGS, built.root, jobs=2, log=logs.append)
    assert again.up_to_date
    assert again.compiled == []
    assert sorted(again.reused) == sorted(NAMES + ["layer", "build_info"])
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
    with pytest.raises(runtime.LoadError, match="its sha256 differs"):
        runtime.load(copy)


def test_load_without_manifest(copy):
    (copy / "manifest.json").unlink()
    with pytest.raises(runtime.LoadError, match="run `moegen build` first"):
        runtime.load(copy)


def test_load_without_library(copy, built):
    (copy / built.manifest["library"]).unlink()
    with pytest.raises(runtime.LoadError, match="library named by .*manifest.json is missing"):
        runtime.load(copy)


@pytest.mark.parametrize("text, why", [
    ("null", "top level = NoneType: expected a JSON object"),
    ("[1, 2]", "top level = list: expected a JSON object"),
    ("{", "not valid JSON"),
])
def test_load_rejects_malformed_manifests(copy, text, why):
    (copy / "manifest.json").write_text(text)
    with pytest.raises(runtime.LoadError, match=why):
        runtime.load(copy)


@pytest.mark.parametrize("field, why", [
    ("library", "field 'library' = None: expected the library's file name"),
    ("spec", "field 'spec' = None: expected the model spec as an object"),
    ("arch", "field 'arch' = None: expected an arch name"),
])
def test_load_rejects_manifests_missing_a_field(copy, field, why):
    m = json.loads((copy / "manifest.json").read_text())
    del m[field]
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(runtime.LoadError) as excinfo:
        runtime.load(copy)
    assert why in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_load_rejects_directories_in_place_of_files(copy, built, tmp_path):
    lib = copy / built.manifest["library"]
    lib.unlink()
    lib.mkdir()
    with pytest.raises(runtime.LoadError, match="not a file"):
        runtime.load(copy)
    (tmp_path / "d" / "manifest.json").mkdir(parents=True)
    with pytest.raises(runtime.LoadError, match="manifest.json: is a directory"):
        runtime.load(tmp_path / "d")
    (tmp_path / "f").write_text("x")
    with pytest.raises(runtime.LoadError, match="not a directory"):
        runtime.load(tmp_path / "f")


def test_manifest_path_escape_is_refused(copy):
    m = json.loads((copy / "manifest.json").read_text())
    m["library"] = "../../etc/libmoegen-x.so"
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(runtime.LoadError, match="expected a libmoegen-\\*.so file name beside it"):
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
#include "moegen/common.cuh"
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
    failed_log = out / build.STAGING / "logs" / f"{broken}.log"  # the failed build's; logs/ stays the built one's
    assert str(failed_log) in msg
    # The compiler's own words, with the file and line.
    assert f"src/{broken}.cu(3): error" in msg
    assert "expected a \")\"" in msg
    assert "expected a \")\"" in failed_log.read_text()
    # Nothing half-built: no library, no manifest, no temp file; the good objects are cached.
    assert not (out / "manifest.json").exists()
    assert not list(out.glob("libmoegen-*"))
    assert not list(tmp_path.rglob(".*tmp"))
    objs = {p.name for p in (tmp_path / ".objects").glob("*.o")}
    assert len(objs) == 3  # the good GEMM kernel, the layer and build_info; not the broken one
    assert any(f"{broken}: FAILED" in m for m in logs)


def test_c_abi_refuses_null_and_misaligned_tensors_before_any_launch(lib):
    """A C caller (no moegen.runtime in front) gets an error naming the pointer, not a device fault."""
    import ctypes
    workspace = ctypes.create_string_buffer(lib.workspace_bytes(4) + 256)
    aligned = (ctypes.addressof(workspace) + 255) // 256 * 256
    weights = binding.Weights(*([4096] * 3), None, *([4096] * 3), None)  # never read: the checks come first
    base = dict(num_tokens=4, logits_dtype=0, weights=weights, hidden=4096, router_logits=4096, out=4096,
                topk_ids=4096, topk_weights=4096, workspace=aligned, workspace_bytes=lib.workspace_bytes(4))
    for change, message in ((dict(hidden=None), "hidden: NULL"), (dict(out=4104), "out at 0x1008: expected 16-byte"),
                            (dict(topk_ids=None), "topk_ids: NULL"), (dict(reserved=1), "reserved = 1: expected 0")):
        args = binding.Args(**{**base, **change})
        assert lib.dll.moegen_forward(ctypes.byref(args), 0, 1, None) != 0
        assert message in lib.last_error(), (change, lib.last_error())
    experts = binding.ExpertsArgs(num_tokens=4, ids_dtype=1, weights=weights, hidden=4096, topk_ids=4100,
                                  topk_weights=4096, out=4096, workspace=aligned,
                                  workspace_bytes=lib.workspace_bytes(4))
    assert lib.dll.moegen_forward_experts(ctypes.byref(experts), 0, 1, None) != 0
    assert "topk_ids at 0x1004: expected 8-byte" in lib.last_error()
