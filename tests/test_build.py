"""Build planning (pure, fingerprinted), atomic writes and ptxas log parsing; no nvcc runs here."""
import dataclasses
import os
import shutil
from pathlib import Path

import cutlass_library
import pytest

from moegen import build, render
from moegen.build import BuildError, Toolchain, atomic_write, plan_build, ptxas_resources, tree_digest
from moegen.config_space import KernelConfig, default_configs
from moegen.spec import load_model

CUTLASS_INCLUDE = Path(cutlass_library.__file__).resolve().parent / "source" / "include"
TOOLCHAIN = Toolchain(nvcc="nvcc", nvcc_version="V13.0.88", cutlass_include=CUTLASS_INCLUDE,
                      cutlass_version="4.2.0")
HEADERS = "h" * 64
CUTLASS = "c" * 64


def plan(spec=None, configs=None, out_dir=Path("/tmp/moegen-test-out"), toolchain=TOOLCHAIN, headers=HEADERS,
         cutlass=CUTLASS, arch="sm90", include_dir=render.INCLUDE_DIR):
    spec = spec or load_model("qwen3-30b-a3b")
    configs = default_configs(spec, "sm90") if configs is None else configs
    return plan_build(spec, arch, configs, out_dir, toolchain, headers_digest=headers, cutlass_digest=cutlass,
                      include_dir=include_dir)


def commands(p):
    return [c.command for c in p.compiles] + [p.link_command]


# --- determinism ------------------------------------------------------------------------------------------

def test_plan_is_deterministic():
    a, b = plan(), plan()
    assert a == b
    assert a.fingerprint == b.fingerprint
    assert commands(a) == commands(b)
    assert [c.fingerprint for c in a.compiles] == [c.fingerprint for c in b.compiles]
    assert a.sources == b.sources
    assert len(a.fingerprint) == 64 and int(a.fingerprint, 16) >= 0


def test_plan_contents():
    spec = load_model("qwen3-30b-a3b")
    configs = default_configs(spec, "sm90")
    p = plan(spec, configs)
    generated = {"problem.h", "layer.cu", *(f"{c.name}.cu" for c in configs)}
    # plus a snapshot of every project header they include, compiled from src/include
    snapshot = {n for n in p.sources if n.startswith("include/moegen/")}
    assert set(p.sources) == generated | snapshot
    assert {"include/moegen/sm90_mxfp4_grouped_gemm.cuh", "include/moegen/moe_routing.cuh"} <= snapshot
    for name in snapshot:
        assert p.sources[name] == (render.INCLUDE_DIR / name[len("include/"):]).read_text()
    assert [c.name for c in p.compiles] == [c.name for c in configs] + ["layer"]
    assert p.library == f"libmoegen-{p.fingerprint[:16]}.so"
    for step in p.compiles:
        assert step.command[0] == "nvcc"
        assert "-gencode=arch=compute_90a,code=sm_90a" in step.command
        assert f"-I{CUTLASS_INCLUDE}" in step.command and "-Isrc/include" in step.command
        assert step.command[-4:] == ("-c", f"src/{step.source}", "-o", f"obj/{step.obj}")
        assert step.obj == f"{step.source[:-3]}-{step.fingerprint[:16]}.o"
    assert p.link_command[:2] == ("nvcc", "-shared")
    assert p.link_command[-len(p.compiles):] == tuple(f"obj/{c.obj}" for c in p.compiles)
    m = p.manifest
    assert m["fingerprint"] == p.fingerprint and m["library"] == p.library
    assert m["variant"] == "qwen3-30b-a3b" and m["arch"] == "sm90" and m["spec"] == spec.to_dict()
    assert [k["name"] for k in m["kernels"]] == [c.name for c in configs]
    assert m["toolchain"]["nvcc"] == "V13.0.88" and m["toolchain"]["cutlass"] == "4.2.0"


# --- what the fingerprint covers --------------------------------------------------------------------------

def _flip_one_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _changed_objects(a, b) -> set[str]:
    return {ca.name for ca, cb in zip(a.compiles, b.compiles, strict=True) if ca.obj != cb.obj}


def test_fingerprint_follows_header_bytes(tmp_path):
    inc = tmp_path / "include"
    shutil.copytree(render.INCLUDE_DIR, inc)
    before = tree_digest(inc)
    assert before == tree_digest(render.INCLUDE_DIR)  # same content elsewhere: same digest
    a = plan(headers=before, include_dir=inc)
    _flip_one_bit(inc / "moegen" / "sm90_mxfp4_grouped_gemm.cuh")
    after = tree_digest(inc)
    assert after != before
    b = plan(headers=after, include_dir=inc)
    assert a.fingerprint != b.fingerprint
    assert a.library != b.library
    # Every GEMM translation unit includes the mainloop (the layer embeds the library fingerprint).
    assert _changed_objects(a, b) == {c.name for c in a.compiles}


def test_routing_header_rebuilds_only_the_layer(tmp_path):
    inc = tmp_path / "include"
    shutil.copytree(render.INCLUDE_DIR, inc)
    a = plan(include_dir=inc)
    _flip_one_bit(inc / "moegen" / "moe_routing.cuh")
    b = plan(include_dir=inc)
    assert _changed_objects(a, b) == {"layer"}
    _flip_one_bit(inc / "moegen" / "moe_common.cuh")  # problem.h includes it: everything
    c = plan(include_dir=inc)
    assert _changed_objects(b, c) == {c.name for c in a.compiles}


def test_included_files_follow_quoted_includes_transitively():
    sources = {"problem.h": '#include "moegen/moe_common.cuh"\n'}
    deps = build.included_files('#include "problem.h"\n#include <cuda.h>\n#include "moegen/moe_epilogues.cuh"\n',
                                render.INCLUDE_DIR, sources)
    assert {"problem.h", "moegen/moe_common.cuh", "moegen/moe_epilogues.cuh", "moegen/sm90_mxfp4_grouped_gemm.cuh",
            "moegen/gemm_params.cuh", "moegen/mxfp4_convert.cuh", "moegen/pdl.cuh"} == set(deps)
    with pytest.raises(BuildError, match='"moegen/nope.cuh"'):
        build.included_files('#include "moegen/nope.cuh"\n', render.INCLUDE_DIR, sources)


def test_tree_digest_sees_renames_and_new_files(tmp_path):
    inc = tmp_path / "include"
    shutil.copytree(render.INCLUDE_DIR, inc)
    before = tree_digest(inc)
    (inc / "moegen" / "abi.h").rename(inc / "moegen" / "abi2.h")
    renamed = tree_digest(inc)
    assert renamed != before
    (inc / "moegen" / "extra.cuh").write_text("// new\n")
    added = tree_digest(inc)
    assert added != renamed
    (inc / "moegen" / "notes.txt").write_text("not a header\n")  # other suffixes are not hashed
    assert tree_digest(inc) == added


def test_same_content_at_another_path_gives_same_fingerprint(tmp_path):
    a_dir, b_dir = tmp_path / "a" / "include", tmp_path / "b" / "elsewhere"
    shutil.copytree(render.INCLUDE_DIR, a_dir)
    shutil.copytree(render.INCLUDE_DIR, b_dir)
    assert tree_digest(a_dir) == tree_digest(b_dir)
    pa = plan(headers=tree_digest(a_dir), out_dir=tmp_path / "out1")
    pb = plan(headers=tree_digest(b_dir), out_dir=tmp_path / "out2" / "deeper")
    assert pa.fingerprint == pb.fingerprint
    assert [c.obj for c in pa.compiles] == [c.obj for c in pb.compiles]
    # A toolchain at another path with the same versions and content: same fingerprint.
    moved = dataclasses.replace(TOOLCHAIN, nvcc="/opt/cuda/bin/nvcc", cutlass_include=tmp_path / "cutlass")
    assert plan(toolchain=moved).fingerprint == plan().fingerprint


def test_fingerprint_follows_spec():
    base = load_model("gpt-oss-20b")
    a = plan(base)
    b = plan(base.with_parallel(tp_size=2))
    assert a.fingerprint != b.fingerprint
    assert a.sources["problem.h"] != b.sources["problem.h"]
    ep = load_model("qwen3-30b-a3b")
    assert plan(ep.with_parallel(ep_size=4, ep_rank=0)).fingerprint != \
        plan(ep.with_parallel(ep_size=4, ep_rank=1)).fingerprint


def test_fingerprint_follows_kernel_list():
    spec = load_model("qwen3-30b-a3b")
    configs = default_configs(spec, "sm90")
    a = plan(spec, configs)
    b = plan(spec, [configs[0], next(c for c in configs if c.gemm == "gemm2")])  # one of each GEMM
    c = plan(spec, configs + [KernelConfig("sm90", "gemm1", 64, 32, 64, 4)])
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3
    # Unchanged kernels keep their objects (cache hits); only layer.cu changes.
    assert {s.obj for s in a.compiles if s.name != "layer"} <= {s.obj for s in c.compiles}
    assert [s.obj for s in a.compiles if s.name == "layer"] != [s.obj for s in c.compiles if s.name == "layer"]


def test_fingerprint_follows_toolchain_version():
    newer = dataclasses.replace(TOOLCHAIN, nvcc_version="V13.0.89")
    a, b = plan(), plan(toolchain=newer)
    assert a.fingerprint != b.fingerprint
    assert not {c.obj for c in a.compiles} & {c.obj for c in b.compiles}
    other_cutlass = dataclasses.replace(TOOLCHAIN, cutlass_version="4.3.0")
    assert plan(toolchain=other_cutlass).fingerprint != a.fingerprint


def test_fingerprint_follows_cutlass_digest():
    a, b = plan(cutlass="c" * 64), plan(cutlass="d" * 64)
    assert a.fingerprint != b.fingerprint
    assert not {c.obj for c in a.compiles} & {c.obj for c in b.compiles}


def test_default_digests_are_the_real_trees(monkeypatch):
    # Without explicit digests plan_build hashes the template tree and the CUTLASS includes.
    monkeypatch.setattr(build, "_cached_tree_digest", lambda root: f"digest of {root}")
    p = plan(headers=None, cutlass=None)
    q = plan(headers=f"digest of {render.TEMPLATE_DIR}", cutlass=f"digest of {CUTLASS_INCLUDE}")
    assert p.fingerprint == q.fingerprint
    assert plan(headers=None, cutlass="x").fingerprint != p.fingerprint


# --- rejected plans ---------------------------------------------------------------------------------------

def test_rejects_sm100():
    spec = load_model("qwen3-30b-a3b")
    with pytest.raises(BuildError, match="SM100"):
        plan(spec, configs=[KernelConfig("sm100", "gemm1", 64, 16, 64, 3)], arch="sm100")


def test_rejects_empty_configs():
    with pytest.raises(BuildError, match="no kernel configs"):
        plan(configs=[])


@pytest.mark.parametrize("only", ["gemm1", "gemm2"])
def test_rejects_configs_missing_a_gemm(only):
    spec = load_model("qwen3-30b-a3b")
    configs = [c for c in default_configs(spec, "sm90") if c.gemm == only]
    missing = {"gemm1": "gemm2", "gemm2": "gemm1"}[only]
    with pytest.raises(BuildError, match=f"no {missing} kernel"):
        plan(spec, configs)


def test_rejects_duplicate_kernels():
    spec = load_model("qwen3-30b-a3b")
    configs = default_configs(spec, "sm90")
    with pytest.raises(BuildError, match="duplicate kernel names.*" + configs[1].name):
        plan(spec, configs + [configs[1]])


def test_rejects_invalid_config():
    spec = load_model("gpt-oss-120b")
    bad = KernelConfig("sm90", "gemm1", 64, 16, 128, 6)  # 128 does not divide K = 2880
    with pytest.raises(BuildError, match="moegen_sm90_gemm1_m64n16k128s6.*block_k must divide"):
        plan(spec, default_configs(spec, "sm90") + [bad])


# --- atomic_write -----------------------------------------------------------------------------------------

def test_atomic_write_creates_and_replaces(tmp_path):
    path = tmp_path / "sub" / "manifest.json"
    atomic_write(path, "first\n")
    assert path.read_text() == "first\n"
    atomic_write(path, b"\x00second")
    assert path.read_bytes() == b"\x00second"
    assert sorted(os.listdir(path.parent)) == ["manifest.json"]


class _Exploding(str):
    """A str whose encoding fails: the write never gets its bytes."""

    def encode(self, *args, **kwargs):
        raise OSError("disk full (simulated)")


def test_atomic_write_failure_keeps_old_content_and_no_temp(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text("original\n")
    with pytest.raises(OSError, match="simulated"):
        atomic_write(path, _Exploding("new content"))
    assert path.read_text() == "original\n"
    assert os.listdir(tmp_path) == ["manifest.json"]
    with pytest.raises(TypeError):
        atomic_write(path, ["not", "bytes"])
    assert path.read_text() == "original\n"
    assert os.listdir(tmp_path) == ["manifest.json"]


def test_atomic_write_failure_mid_write(tmp_path, monkeypatch):
    """Some bytes already written when the write fails: the target still holds the old content."""
    path = tmp_path / "big.bin"
    path.write_bytes(b"old")
    real_fdopen = os.fdopen

    class HalfFile:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise OSError("no space left on device (simulated)")

    monkeypatch.setattr(build.os, "fdopen", lambda fd, mode: HalfFile(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match="simulated"):
        atomic_write(path, b"x" * 1000)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["big.bin"]


# --- ptxas logs -------------------------------------------------------------------------------------------

PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN6moegen4sm9013gemm_kernelILi64ELi16EEEvNS0_10GemmParamsE' for 'sm_90a'
ptxas info    : Function properties for _ZN6moegen4sm9013gemm_kernelILi64ELi16EEEvNS0_10GemmParamsE
    0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 512 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN6moegen12route_kernelEv' for 'sm_90a'
ptxas info    : Function properties for _ZN6moegen12route_kernelEv
    8 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 90 registers, used 0 barriers, 400 bytes cmem[0]
"""
SERIALIZED_LOG = """ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions defining input registers of a wgmma between start and end of the pipeline stage in the function '_ZN6moegen4sm9013gemm_kernelILi64ELi16EEEvNS0_10GemmParamsE'
"""
REGISTER_SERIALIZED_LOG = """ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources for the function '_ZN6moegen4sm9013gemm_kernelILi64ELi16EEEvNS0_10GemmParamsE'
"""
CLEAN = {"spill_bytes": 0, "wgmma_serialized": 0}


def test_ptxas_resources():
    assert ptxas_resources(PTXAS_LOG) == {"max_registers": 168, "spill_bytes": 40, "wgmma_serialized": 0}
    first = PTXAS_LOG.split("ptxas info    : Compiling entry function '_ZN6moegen12route")[0]
    assert ptxas_resources(first) == {"max_registers": 168, "spill_bytes": 8, "wgmma_serialized": 0}
    assert ptxas_resources(SERIALIZED_LOG + PTXAS_LOG)["wgmma_serialized"] == 1
    assert ptxas_resources(REGISTER_SERIALIZED_LOG + PTXAS_LOG)["wgmma_serialized"] == 1  # C7512 counts too


def test_ptxas_resources_empty_log():
    assert ptxas_resources("") == {"max_registers": 0, **CLEAN}
    assert ptxas_resources("src/x.cu(3): error: expected a \";\"\n") == {"max_registers": 0, **CLEAN}
