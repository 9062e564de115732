"""Build planning (pure, fingerprinted) and execution (object store, lock, atomic publish), with a fake
nvcc (tests/helpers/fake_nvcc.py) so the races and kills of real builds run in CI in seconds."""
import dataclasses
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import cutlass_library
import pytest
import yaml

from moegen import build, render
from moegen.arch import get_arch
from moegen.artifact import ArtifactError, embedded_build_info, file_sha256, read_manifest, verify_library
from moegen.build import BuildError, Toolchain, plan_build, ptxas_resources, tree_digest
from moegen.naming import KernelConfig
from moegen.spec import load_model, model_from_dict

ROOT = Path(__file__).resolve().parents[1]
CUTLASS_INCLUDE = Path(cutlass_library.__file__).resolve().parent / "source" / "include"
TOOLCHAIN = Toolchain(nvcc="nvcc", nvcc_version="V13.0.88", cutlass_include=CUTLASS_INCLUDE,
                      cutlass_version="4.2.0")
CUTLASS = "c" * 64
GENERATOR = "g" * 64
TINY = {"name": "tiny", "num_experts": 8, "hidden_size": 256, "intermediate_size": 128,
        "router": {"kind": "softmax_topk", "top_k": 2}, "activation": {"kind": "swiglu"}}


def default_configs(spec, arch="sm90"):
    return get_arch(arch).fallback_configs(spec)


def plan(spec=None, configs=None, out_root=Path("/tmp/moegen-test-out"), toolchain=TOOLCHAIN, cutlass=CUTLASS,
         arch="sm90", include_dir=render.INCLUDE_DIR, generator=GENERATOR):
    spec = spec or load_model("qwen3-30b-a3b")
    configs = default_configs(spec) if configs is None else configs
    return plan_build(spec, arch, configs, out_root, toolchain, cutlass_digest=cutlass, include_dir=include_dir,
                      generator=generator)


def commands(p):
    return [c.command for c in p.compiles] + [p.link_command]


# --- the plan ---------------------------------------------------------------------------------------------

def test_plan_is_deterministic():
    a, b = plan(), plan()
    assert a == b
    assert commands(a) == commands(b)
    assert len(a.fingerprint) == 64 and int(a.fingerprint, 16) >= 0


def test_plan_contents():
    spec = load_model("qwen3-30b-a3b")
    configs = default_configs(spec)
    p = plan(spec, configs, out_root=Path("/x/gen"))
    assert p.out_dir == Path("/x/gen/qwen3-30b-a3b/sm90") and p.store == Path("/x/gen/.objects")
    generated = {"layer.cu", "build_info.cu", *(f"{c.name}.cu" for c in configs)}
    snapshot = {n for n in p.sources if n.startswith("include/moegen/")}
    assert set(p.sources) == generated | snapshot
    assert {"include/moegen/sm90/grouped_gemm.cuh", "include/moegen/routing.cuh",
            "include/moegen/activation.cuh"} <= snapshot
    for name in snapshot:
        assert p.sources[name] == (render.INCLUDE_DIR / name[len("include/"):]).read_text()
    assert [c.name for c in p.compiles] == [c.name for c in configs] + ["layer", "build_info"]
    assert p.library == f"libmoegen-{p.fingerprint[:16]}.so"
    for step in p.compiles:
        assert step.command[0] == "nvcc"
        assert "-gencode=arch=compute_90a,code=sm_90a" in step.command
        assert f"-I{CUTLASS_INCLUDE}" in step.command and "-Isrc/include" in step.command
        assert step.command[-2:] == ("-c", f"src/{step.source}")
        assert step.obj == f"{step.fingerprint}.o"
    assert p.link_command[:4] == ("nvcc", "-shared", "-gencode=arch=compute_90a,code=sm_90a",
                                  "-Xlinker=--no-undefined")
    assert p.link_command[-len(p.compiles):] == tuple(f"../../.objects/{c.obj}" for c in p.compiles)
    m = p.manifest
    assert m["fingerprint"] == p.fingerprint and m["library"] == p.library
    assert m["variant"] == "qwen3-30b-a3b" and m["arch"] == "sm90" and m["spec"] == spec.to_dict()
    assert m["weight_layout"] == "sm90_e2m1_atom64" and m["activation_format"] == "bf16"
    assert m["compute_capability"] == [9, 0] and m["generator"] == GENERATOR
    assert m["objects"] == {c.name: c.fingerprint for c in p.compiles}
    assert [k["name"] for k in m["kernels"]] == [c.name for c in configs]
    assert m["toolchain"]["nvcc"] == "V13.0.88" and m["toolchain"]["cutlass"] == "4.2.0"


def _flip_one_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _changed_objects(a, b) -> set[str]:
    return {ca.name for ca, cb in zip(a.compiles, b.compiles, strict=True) if ca.obj != cb.obj}


def _includes_copy(tmp_path):
    inc = tmp_path / "include"
    shutil.copytree(render.INCLUDE_DIR, inc)
    return inc


def test_mainloop_edit_rebuilds_every_gemm_kernel(tmp_path):
    inc = _includes_copy(tmp_path)
    a = plan(include_dir=inc)
    _flip_one_bit(inc / "moegen" / "sm90" / "grouped_gemm.cuh")
    b = plan(include_dir=inc)
    assert a.fingerprint != b.fingerprint and a.library != b.library
    # every GEMM translation unit, and build_info (it embeds the new fingerprint); not the layer
    assert _changed_objects(a, b) == {c.name for c in a.compiles} - {"layer"}


def test_routing_edit_rebuilds_only_the_layer(tmp_path):
    inc = _includes_copy(tmp_path)
    a = plan(include_dir=inc)
    _flip_one_bit(inc / "moegen" / "routing.cuh")
    b = plan(include_dir=inc)
    assert _changed_objects(a, b) == {"layer", "build_info"}
    _flip_one_bit(inc / "moegen" / "common.cuh")  # activation vocabulary: the GEMM kernels and the layer
    c = plan(include_dir=inc)
    assert _changed_objects(b, c) == {s.name for s in a.compiles}


def test_generator_edit_changes_the_library_not_the_objects(tmp_path):
    """Editing a render function changes the library's fingerprint (the generator's source is hashed in)."""
    a, b = plan(generator="1" * 64), plan(generator="2" * 64)
    assert a.fingerprint != b.fingerprint and a.library != b.library
    assert _changed_objects(a, b) == {"build_info"}
    pkg = tmp_path / "moegen"
    shutil.copytree(ROOT / "moegen", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    before = build.generator_digest(pkg)
    render_py = pkg / "render.py"
    render_py.write_text(render_py.read_text().replace("def _cpp_bool(b: bool) -> str:",
                                                       "def _cpp_bool(b: bool) -> str:  # edited"))
    assert build.generator_digest(pkg) != before
    (pkg / "arch" / "sm90.py").write_text((pkg / "arch" / "sm90.py").read_text() + "\n# edited\n")
    assert build.generator_digest(pkg) != before
    bench_py = pkg / "bench.py"  # not the generator: a runtime tool
    after = build.generator_digest(pkg)
    bench_py.write_text(bench_py.read_text() + "\n# edited\n")
    assert build.generator_digest(pkg) == after


def test_included_files_follow_quoted_includes_transitively():
    deps = build.included_files('#include <cuda.h>\n#include "moegen/sm90/grouped_gemm.cuh"\n', render.INCLUDE_DIR, {})
    assert {"moegen/sm90/grouped_gemm.cuh", "moegen/sm90/epilogue.cuh", "moegen/sm90/mxfp4_convert.cuh",
            "moegen/activation.cuh", "moegen/common.cuh", "moegen/sm90/gemm_params.cuh", "moegen/pdl.cuh",
            "moegen/progress.cuh"} == set(deps)
    with pytest.raises(BuildError, match='"moegen/nope.cuh"'):
        build.included_files('#include "moegen/nope.cuh"\n', render.INCLUDE_DIR, {})


def test_tree_digest_sees_renames_and_new_files(tmp_path):
    inc = _includes_copy(tmp_path)
    before = tree_digest(inc)
    (inc / "moegen" / "abi.h").rename(inc / "moegen" / "abi2.h")
    renamed = tree_digest(inc)
    assert renamed != before
    (inc / "moegen" / "extra.cuh").write_text("// new\n")
    added = tree_digest(inc)
    assert added != renamed
    (inc / "moegen" / "notes.txt").write_text("not a source\n")  # other suffixes are not hashed
    assert tree_digest(inc) == added


def test_same_content_elsewhere_gives_the_same_fingerprint(tmp_path):
    pa = plan(out_root=tmp_path / "out1")
    pb = plan(out_root=tmp_path / "out2" / "deeper")
    assert pa.fingerprint == pb.fingerprint
    assert [c.obj for c in pa.compiles] == [c.obj for c in pb.compiles]
    moved = dataclasses.replace(TOOLCHAIN, nvcc="/opt/cuda/bin/nvcc", cutlass_include=tmp_path / "cutlass")
    assert plan(toolchain=moved).fingerprint == plan().fingerprint


def test_fingerprint_follows_spec():
    base = load_model("gpt-oss-20b")
    a = plan(base)
    b = plan(base.with_parallel(tp_size=2))
    assert a.fingerprint != b.fingerprint
    ep = load_model("qwen3-30b-a3b")
    e0, e1 = plan(ep.with_parallel(ep_size=4, ep_rank=0)), plan(ep.with_parallel(ep_size=4, ep_rank=1))
    assert e0.fingerprint != e1.fingerprint
    assert _changed_objects(e0, e1) == {"layer", "build_info"}  # the ranks share every GEMM object


def test_fingerprint_follows_kernel_list():
    spec = load_model("qwen3-30b-a3b")
    configs = default_configs(spec)
    a = plan(spec, configs)
    b = plan(spec, [configs[0], next(c for c in configs if c.gemm == "gemm2")])  # one of each GEMM
    c = plan(spec, configs + [KernelConfig("sm90", "gemm1", 64, 32, 64, 4)])
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3
    assert {s.obj for s in a.compiles if s.name not in ("layer", "build_info")} <= {s.obj for s in c.compiles}


def test_fingerprint_follows_toolchain_and_cutlass():
    newer = dataclasses.replace(TOOLCHAIN, nvcc_version="V13.0.89")
    a, b = plan(), plan(toolchain=newer)
    assert a.fingerprint != b.fingerprint
    assert not {c.obj for c in a.compiles} & {c.obj for c in b.compiles}
    assert plan(toolchain=dataclasses.replace(TOOLCHAIN, cutlass_version="4.3.0")).fingerprint != a.fingerprint
    assert not {c.obj for c in plan(cutlass="d" * 64).compiles} & {c.obj for c in a.compiles}


def test_rejected_plans():
    spec = load_model("qwen3-30b-a3b")
    configs = default_configs(spec)
    with pytest.raises(BuildError, match="arch 'sm75': expected one of"):
        plan(spec, configs=[KernelConfig("sm75", "gemm1", 64, 16, 64, 3)], arch="sm75")
    with pytest.raises(BuildError, match="no kernel configs"):
        plan(configs=[])
    with pytest.raises(BuildError, match="no gemm2 kernel"):
        plan(spec, [c for c in configs if c.gemm == "gemm1"])
    with pytest.raises(BuildError, match="duplicate kernel names.*" + configs[1].name):
        plan(spec, configs + [configs[1]])
    bad = KernelConfig("sm90", "gemm1", 128, 64, 128, 6)  # one 128-deep step cannot end K = 2880
    with pytest.raises(BuildError, match="moegen_sm90_gemm1_m128n64k128s6.*must end on a whole consumer step"):
        plan(load_model("gpt-oss-120b"), default_configs(load_model("gpt-oss-120b")) + [bad])


# --- ptxas logs -------------------------------------------------------------------------------------------

PTXAS_LOG = """\
ptxas info    : Compiling entry function '_ZN6moegen4sm9013gemm_kernelILi64ELi16EEEvNS0_10GemmParamsE' for 'sm_90a'
    0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 512 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN6moegen12route_kernelEv' for 'sm_90a'
    8 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 90 registers, used 0 barriers, 400 bytes cmem[0]
"""
SERIALIZED = ("ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized due "
              "to non wgmma instructions defining input registers\n")


def test_ptxas_resources():
    assert ptxas_resources(PTXAS_LOG) == {"max_registers": 168, "spill_bytes": 40, "stack_bytes": 8,
                                          "wgmma_serialized": 0}
    outlined = PTXAS_LOG.replace("8 bytes stack frame, 12 bytes spill stores, 20", "544 bytes stack frame, 0 bytes spill stores, 0")
    assert ptxas_resources(outlined)["stack_bytes"] == 544 and ptxas_resources(outlined)["spill_bytes"] == 8
    assert ptxas_resources(SERIALIZED + PTXAS_LOG)["wgmma_serialized"] == 1
    assert ptxas_resources(SERIALIZED.replace("C7513", "C7512") + PTXAS_LOG)["wgmma_serialized"] == 1
    assert ptxas_resources("") == {"max_registers": 0, "spill_bytes": 0, "stack_bytes": 0, "wgmma_serialized": 0}


# --- execution with a fake nvcc ---------------------------------------------------------------------------

FAKE_NVCC = Path(__file__).parent / "helpers" / "fake_nvcc.py"


@pytest.fixture
def fake_toolchain(tmp_path):
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_NVCC}" "$@"\n')
    wrapper.chmod(0o755)
    return Toolchain(nvcc=str(wrapper), nvcc_version="V13.0.88", cutlass_include=CUTLASS_INCLUDE,
                     cutlass_version="4.2.0")


def tiny(**changes):
    return model_from_dict(dict(TINY, **changes), "tiny.yaml")


TINY_SETS = {"a": [KernelConfig("sm90", "gemm1", 64, 8, 64, 4), KernelConfig("sm90", "gemm2", 64, 8, 64, 4)],
             "b": [KernelConfig("sm90", "gemm1", 64, 16, 64, 4), KernelConfig("sm90", "gemm2", 64, 8, 64, 4),
                   KernelConfig("sm90", "gemm2", 64, 32, 64, 3)]}


def assert_consistent(out_dir: Path) -> dict:
    """The manifest names a library that exists, has the manifest's sha256, and embeds its fingerprint
    and kernel table (verify_library); returns that build info."""
    m = read_manifest(out_dir)
    verify_library(m)
    libraries = {p.name for p in out_dir.glob("libmoegen-*.so")}
    assert m.library in libraries and len(libraries) <= 2, libraries  # the previous build's kept for a generation
    assert not list(out_dir.glob(".*.tmp"))
    return embedded_build_info(m.library_path.read_bytes(), m.fingerprint)


def run(spec, configs, root, toolchain, **kw):
    return build.build(spec, "sm90", configs, root, jobs=2, log=lambda m: None, toolchain=toolchain, **kw)


def test_build_compiles_links_and_is_then_up_to_date(tmp_path, fake_toolchain):
    root = tmp_path / "gen"
    first = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    out = first.plan.out_dir
    assert sorted(first.compiled) == sorted([c.name for c in TINY_SETS["a"]] + ["layer", "build_info"])
    assert first.resources[TINY_SETS["a"][0].name]["max_registers"] == 42
    assert_consistent(out)
    again = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    assert again.up_to_date and not again.compiled
    assert again.resources == first.resources


def test_switching_kernel_sets_reuses_objects(tmp_path, fake_toolchain):
    """Switching kernel sets (all -> default -> all) keeps both sets' objects: nothing recompiles."""
    root = tmp_path / "gen"
    run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    b = run(tiny(), TINY_SETS["b"], root, fake_toolchain)
    assert TINY_SETS["a"][1].name in b.reused  # the shared gemm2 kernel
    back = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    assert set(back.compiled) <= {"layer", "build_info"}  # every kernel object still cached
    assert_consistent(back.plan.out_dir)


def test_logs_and_sources_are_this_builds(tmp_path, fake_toolchain):
    """logs/ holds this build's log of every kernel, also of one whose object came from the store (its
    ptxas report is the linked object's), and src/ and logs/ hold nothing of kernels no longer built."""
    root = tmp_path / "gen"
    run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    b = run(tiny(), TINY_SETS["b"], root, fake_toolchain)
    out = b.plan.out_dir
    shared = TINY_SETS["a"][1].name
    assert shared in b.reused
    (out / "logs" / f"{shared}.log").write_text("stale")
    back = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    names = {c.name for c in back.plan.compiles}
    assert {p.stem for p in (out / "logs").glob("*.log")} == names
    assert {p.stem for p in (out / "src").glob("*.cu")} == names
    for name in set(names) - set(back.compiled):  # cached: the log the store kept with the object
        log = (out / "logs" / f"{name}.log").read_text()
        assert "Used 42 registers" in log and log.startswith(str(fake_toolchain.nvcc)), name


def test_truncated_object_is_rebuilt(tmp_path, fake_toolchain):
    """A cached object truncated to 0 bytes is recompiled, not linked into a broken library."""
    root = tmp_path / "gen"
    first = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    victim = next(c for c in first.plan.compiles if c.name == TINY_SETS["a"][1].name)
    (root / ".objects" / victim.obj).write_bytes(b"")
    second = run(tiny(), TINY_SETS["b"], root, fake_toolchain)  # links the truncated object's kernel
    assert victim.name in second.compiled
    assert (root / ".objects" / victim.obj).stat().st_size > 0
    assert_consistent(second.plan.out_dir)


def test_empty_object_fails_the_link_instead_of_the_dlopen(tmp_path, fake_toolchain):
    built = run(tiny(), TINY_SETS["a"], tmp_path / "gen", fake_toolchain)
    p = plan(tiny(), TINY_SETS["a"], out_root=tmp_path / "gen", toolchain=fake_toolchain)  # another generator
    assert "-Xlinker=--no-undefined" in p.link_command
    obj = tmp_path / "gen" / ".objects" / p.compiles[0].obj
    obj.write_bytes(b"")  # empty, and recorded as such: the store's check passes, the link must not
    (tmp_path / "gen" / ".objects" / f"{p.compiles[0].obj}.sha256").write_text(file_sha256(obj) + "\n")
    with pytest.raises(BuildError, match="link of libmoegen-.*failed"):
        build.run_build(p, jobs=2, log=lambda m: None)
    # nothing already built is lost, nothing half-written is left
    assert [x.name for x in p.out_dir.glob("libmoegen-*.so")] == [built.plan.library]
    assert read_manifest(p.out_dir).library == built.plan.library and not list(p.out_dir.glob(".*.tmp"))


# A build in a process of its own, through build.build() or, with "cli" after the arguments, through
# `moegen build` (whose SIGTERM handler is under test): argv = nvcc, CUTLASS include, out root, spec, kernels.
_BUILD_SCRIPT = textwrap.dedent("""
    import faulthandler, signal, sys
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # _finish's stack dump of a stuck build
    # A shell's background job starts with SIGINT ignored, and children inherit that: the tests send one.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from pathlib import Path
    from moegen import build
    from moegen.build import Toolchain
    from moegen.naming import parse_kernel_name
    from moegen.spec import load_model
    nvcc, cutlass, root, spec_path, names = sys.argv[1:6]
    tc = Toolchain(nvcc=nvcc, nvcc_version="V13.0.88", cutlass_include=Path(cutlass), cutlass_version="4.2.0")
    if sys.argv[6:] == ["cli"]:
        from moegen.cli import main
        build.find_toolchain = lambda: tc
        main(["build", "--model", spec_path, "--arch", "sm90", "--kernels", names, "--jobs", "2", "--out", root])  # exits
    kernels = [parse_kernel_name(n) for n in names.split(",")]
    build.build(load_model(spec_path), "sm90", kernels, Path(root), jobs=2, log=lambda m: None, toolchain=tc)
""")


def _start_build(toolchain, root, spec_path, configs, env=None, cli=False):
    return subprocess.Popen([sys.executable, "-c", _BUILD_SCRIPT, toolchain.nvcc, str(toolchain.cutlass_include),
                             str(root), str(spec_path), ",".join(c.name for c in configs), *(["cli"] if cli else [])],
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_builds_of_different_kernel_sets_and_spec_versions(tmp_path, fake_toolchain):
    """Two builds into one directory, started together, end with a manifest naming the library it
    describes, every round (without the locks, 3-9 rounds of 10-20 did not)."""
    root = tmp_path / "gen"
    v1 = tmp_path / "v1.yaml"
    v1.write_text(yaml.safe_dump(TINY))
    v2 = tmp_path / "v2.yaml"  # another version of the same-named spec
    v2.write_text(yaml.safe_dump(dict(TINY, hidden_size=512)))
    rounds = [(v1, TINY_SETS["a"], v1, TINY_SETS["b"])] * 6 + [(v1, TINY_SETS["a"], v2, TINY_SETS["a"])] * 6
    env = {"FAKE_NVCC_SLEEP": "0.05"}
    for i, (spec_a, set_a, spec_b, set_b) in enumerate(rounds):
        procs = [_start_build(fake_toolchain, root, spec_a, set_a, env),
                 _start_build(fake_toolchain, root, spec_b, set_b, env)]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        info = assert_consistent(root / "tiny" / "sm90")
        assert info["kernels"] in ([c.name for c in set_a], [c.name for c in set_b]), i


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (exited, not yet reaped) is not running
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _finish(proc: subprocess.Popen, timeout: float) -> str:
    """A build process's stderr once it exits; past the timeout, a failure showing its threads' stacks."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        with open(f"/proc/{proc.pid}/status") as f:
            masks = " ".join(line.strip() for line in f if line.startswith(("SigIgn", "SigCgt", "SigPnd", "ShdPnd")))
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        proc.kill()
        pytest.fail(f"the build did not exit within {timeout} s ({masks}):\n{proc.communicate()[1]}")


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm-to-the-cli"])
def test_interrupted_build_stops_its_compiles_at_once(tmp_path, fake_toolchain, how):
    """Ctrl-C, or SIGTERM to `moegen build`, ends a build within seconds: no queued compile starts, the
    running ones are killed with their children (cicc, ptxas), and the built library stays."""
    root, pids = tmp_path / "gen", tmp_path / "pids"
    pids.mkdir()
    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(yaml.safe_dump(TINY))
    built = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    cli = how == "sigterm-to-the-cli"
    system_tmp = tmp_path / "system-tmp"  # the TMPDIR the user's shell has
    system_tmp.mkdir()
    proc = _start_build(fake_toolchain, root, spec_path, TINY_SETS["b"],
                        {"FAKE_NVCC_CHILD_PIDS": str(pids), "FAKE_NVCC_CHILD_SLEEP": "120",
                         "TMPDIR": str(system_tmp)}, cli=cli)
    deadline = time.monotonic() + 60
    while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:  # both parallel jobs running
        time.sleep(0.05)
    assert len(list(pids.iterdir())) == 2, proc.communicate(timeout=60)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM if cli else signal.SIGINT)
    err = _finish(proc, timeout=60)
    assert time.monotonic() - start < 10 and proc.returncode != 0
    if cli:  # click's one line, no traceback
        assert err.strip().splitlines()[-1] == "Aborted!" and "Traceback" not in err, err
    else:
        assert "KeyboardInterrupt" in err
    started = [int(pid) for f in pids.iterdir() for pid in f.name.split("-")]
    assert len(started) == 4  # two compiles of the three, none queued after the interrupt
    assert not [pid for pid in started if _alive(pid)]
    # the killed compiles' intermediates stayed in the build directory's staging, never in TMPDIR
    assert list(system_tmp.iterdir()) == []
    assert read_manifest(built.plan.out_dir).library == built.plan.library
    assert_consistent(built.plan.out_dir)
    assert not list((root / ".objects").glob(".*tmp*"))


def test_failed_rebuild_keeps_the_built_sources_and_logs(tmp_path, fake_toolchain, monkeypatch):
    root = tmp_path / "gen"
    first = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    out = first.plan.out_dir
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and ".lock" not in p.name}
    monkeypatch.setattr(build, "_link", lambda plan: (_ for _ in ()).throw(BuildError("link failed (simulated)")))
    with pytest.raises(BuildError, match="simulated"):
        run(tiny(), TINY_SETS["b"], root, fake_toolchain)  # compiles into the staging directory, then fails
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*")
             if p.is_file() and ".lock" not in p.name and build.STAGING not in p.parts}
    assert after == before
    assert_consistent(out)
    monkeypatch.undo()
    second = run(tiny(), TINY_SETS["b"], root, fake_toolchain)
    assert {p.stem for p in (out / "src").glob("*.cu")} == {c.name for c in second.plan.compiles}
    assert [p.name for p in (out / build.STAGING).iterdir()] == ["src"] and (out / build.STAGING / "src").is_symlink()
    assert_consistent(out)


@pytest.mark.parametrize("leftover", ["symlink", "file"])
def test_a_staging_leftover_is_replaced_never_followed(tmp_path, fake_toolchain, leftover):
    root, elsewhere = tmp_path / "gen", tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = root / "tiny" / "sm90"
    out.mkdir(parents=True)
    if leftover == "symlink":
        (out / build.STAGING).symlink_to(elsewhere)
    else:
        (out / build.STAGING).write_text("x")
    run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    assert list(elsewhere.iterdir()) == [] and (out / build.STAGING / "src").is_symlink()
    assert_consistent(out)


def test_killed_link_leaves_nothing_behind(tmp_path, fake_toolchain):
    """A link killed midway leaves no temporary library behind, and the next build completes."""
    root = tmp_path / "gen"
    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(yaml.safe_dump(TINY))
    proc = _start_build(fake_toolchain, root, spec_path, TINY_SETS["a"], {"FAKE_NVCC_LINK_SLEEP": "2"})
    out = root / "tiny" / "sm90"
    deadline = time.monotonic() + 60
    while not list(out.glob(".libmoegen-*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(out.glob(".libmoegen-*.tmp")), "the link never started"
    # the build's process group: the python build and the fake nvcc it runs
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    subprocess.run(["pkill", "-9", "-f", str(FAKE_NVCC)], check=False)
    assert not (out / "manifest.json").exists()
    result = run(model_from_dict(TINY, str(spec_path)), TINY_SETS["a"], root, fake_toolchain)
    assert not result.up_to_date
    assert_consistent(out)


def test_clean_prunes_only_unreferenced_objects(tmp_path, fake_toolchain):
    root = tmp_path / "gen"
    a = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    b = run(tiny(), TINY_SETS["b"], root, fake_toolchain)
    stale = (root / ".objects" / ".deadbeef.o.999999999.1.tmp")
    stale.write_bytes(b"junk")  # a dead process's leftover
    referenced = {c.obj for c in b.plan.compiles}
    only_a = {c.obj for c in a.plan.compiles} - referenced
    assert only_a
    build.clean(root, log=lambda m: None)
    left = {p.name for p in (root / ".objects").glob("*.o")}
    assert left == referenced and not stale.exists()
    assert_consistent(b.plan.out_dir)


def test_clean_touches_only_the_stores_own_files_and_waits_for_builds(tmp_path, fake_toolchain):
    root = tmp_path / "gen"
    b = run(tiny(), TINY_SETS["b"], root, fake_toolchain)
    foreign = root / ".objects" / "thesis.tex"
    foreign.write_text("not moegen's")
    odd = root / "odd" / "sm90"
    odd.mkdir(parents=True)
    (odd / "manifest.json").write_text(json.dumps(dict(json.loads((b.plan.out_dir / "manifest.json").read_text()),
                                                       objects=[1])))
    lines = []
    with build.directory_lock(root / ".objects", log=lines.append, shared=True, name=build.STORE_LOCK_NAME):  # a build in progress
        cleaner = threading.Thread(target=build.clean, args=(root,), kwargs=dict(log=lines.append))
        cleaner.start()
        cleaner.join(timeout=1.0)
        assert cleaner.is_alive() and not any("removed" in line for line in lines)
        # the waiting clean holds the gate: a new build queues behind it instead of starving it
        gate = os.open(root / ".objects" / build.STORE_GATE_NAME, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(gate, fcntl.LOCK_SH | fcntl.LOCK_NB)
        finally:
            os.close(gate)
    cleaner.join(timeout=10)
    assert not cleaner.is_alive() and any("removed" in line for line in lines)
    assert foreign.read_text() == "not moegen's"
    assert any("odd/sm90/manifest.json: unreadable" in line for line in lines)
    assert_consistent(b.plan.out_dir)
    for bad, expected in ((tmp_path / "nope", "does not exist"), (tmp_path / "gen" / "odd", "no object store")):
        with pytest.raises(BuildError, match=expected):
            build.clean(bad, log=lambda m: None)


def test_a_build_waits_for_a_clean_that_is_waiting_for_other_builds(tmp_path, fake_toolchain):
    root = tmp_path / "gen"
    before = (run(tiny(), TINY_SETS["a"], root, fake_toolchain).plan.out_dir / "manifest.json").read_bytes()
    lines = []
    plan = build.plan_build(tiny(), "sm90", TINY_SETS["b"], root, toolchain=fake_toolchain)
    with build.directory_lock(root / ".objects", log=lambda m: None, name=build.STORE_GATE_NAME):  # a clean, waiting
        builder = threading.Thread(target=build.run_build, args=(plan,), kwargs=dict(log=lines.append))
        builder.start()
        builder.join(timeout=1.0)
        assert builder.is_alive() and any("waiting for `moegen clean`" in line for line in lines)
        assert (plan.out_dir / "manifest.json").read_bytes() == before
    builder.join(timeout=60)
    assert not builder.is_alive()
    assert set(assert_consistent(plan.out_dir)["kernels"]) == {c.name for c in TINY_SETS["b"]}


@pytest.mark.parametrize("make_out, expected", [
    (lambda tmp: tmp / "file", "exists and is not a directory"),
    (lambda tmp: tmp / "file" / "below", "a parent is a file"),
    (lambda tmp: Path("/proc/moegen-out"), "/proc/moegen-out: cannot create the output directory"),
])
def test_bad_output_roots_are_one_line_errors(tmp_path, fake_toolchain, make_out, expected):
    (tmp_path / "file").write_text("x")
    with pytest.raises(BuildError) as excinfo:
        run(tiny(), TINY_SETS["a"], make_out(tmp_path), fake_toolchain)
    assert expected in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_jobs_must_be_positive(tmp_path, fake_toolchain):
    with pytest.raises(BuildError, match="--jobs = -1: expected a positive number"):
        build.build(tiny(), "sm90", TINY_SETS["a"], tmp_path, jobs=-1, log=lambda m: None, toolchain=fake_toolchain)


def test_nothing_is_written_outside_the_output_root(tmp_path, fake_toolchain):
    root = tmp_path / "gen"
    before = set(tmp_path.iterdir())
    run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    assert set(tmp_path.iterdir()) - before == {root}


def test_a_store_inside_the_build_directory_does_not_lock_itself(tmp_path, fake_toolchain):
    spec = tiny()
    out = build.output_dir(spec, "sm90", tmp_path / "gen")
    result = run(spec, TINY_SETS["a"], tmp_path / "gen", fake_toolchain, store=out)  # would hang on one lock file
    assert_consistent(result.plan.out_dir)
    assert (out / build.STAGING / "src").resolve() == (out / "src").resolve()  # where the line info points


def test_a_rebuild_keeps_the_previous_library_for_a_load_that_read_the_previous_manifest(tmp_path, fake_toolchain):
    root = tmp_path / "gen"
    a = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    out = a.plan.out_dir
    b = run(tiny(), TINY_SETS["b"], root, fake_toolchain)
    assert {p.name for p in out.glob("libmoegen-*.so")} == {a.plan.library, b.plan.library}
    c = run(tiny(hidden_size=512), TINY_SETS["a"], root, fake_toolchain)
    assert {p.name for p in out.glob("libmoegen-*.so")} == {b.plan.library, c.plan.library}
    assert_consistent(out)


def test_store_leftovers_of_running_writers_stay(tmp_path, monkeypatch):
    """A build cleaning the shared store removes killed runs' temporary files only: not a running
    writer's (its pid in the name, or too young to be a leftover in another pid namespace)."""
    store = tmp_path / ".objects"
    store.mkdir()
    old = time.time() - build.LEFTOVER_AGE_S - 60
    dead = 2 ** 22 + 12345  # above Linux's default pid_max
    files = {"live": f".a.o.{os.getpid()}.{threading.get_ident()}.tmp", "live_mkstemp": f".a.o.log.{os.getpid()}.x1_y2z3w.tmp",
             "dead_young": f".b.o.{dead}.1.tmp", "dead_old": f".c.o.{dead}.1.tmp",
             "unnamed_young": ".d.o.sha256.ab12cd34.tmp", "unnamed_old": ".e.o.sha256.ab12cd34.tmp"}
    for key, name in files.items():
        (store / name).write_text("x")
        if key in ("dead_old", "unnamed_old"):
            os.utime(store / name, (old, old))
    os.utime(store / files["unnamed_old"], (old - build.UNNAMED_LEFTOVER_AGE_S,) * 2)
    os.utime(store / files["live"], (old, old))  # a long compile's output: its writer runs
    assert sorted(build.remove_leftovers(store, only_dead=True)) == sorted([files["dead_old"], files["unnamed_old"]])
    with build.directory_lock(store, name=build.STORE_LOCK_NAME, log=lambda m: None):  # as clean holds it
        assert len(build.remove_leftovers(store, only_dead=False)) == 4


def test_atomic_writes_name_their_writer(tmp_path, monkeypatch):
    seen = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (seen.append(Path(a).name), real(a, b))[1])
    from moegen.artifact import atomic_write
    atomic_write(tmp_path / "x.o.sha256", "d")
    assert build._TMP_PID.search(seen[0]).group(1) == str(os.getpid())


def test_a_symlinked_build_directory_links_and_is_kept_by_clean(tmp_path, fake_toolchain):
    root = tmp_path / "gen"
    elsewhere = tmp_path / "elsewhere" / "tiny"
    elsewhere.mkdir(parents=True)
    root.mkdir()
    (root / "tiny").symlink_to(elsewhere)
    built = run(tiny(), TINY_SETS["a"], root, fake_toolchain)
    assert_consistent(built.plan.out_dir)
    build.clean(root, log=lambda m: None)  # the symlinked build's objects are referenced
    assert all((root / ".objects" / c.obj).is_file() for c in built.plan.compiles)


def test_the_cutlass_util_headers_are_in_the_fingerprints(tmp_path, fake_toolchain):
    cutlass = tmp_path / "cutlass"
    include, util = cutlass / "source" / "include", cutlass / "source" / "tools" / "util" / "include"
    (include / "cutlass").mkdir(parents=True)
    (include / "cutlass" / "version.h").write_text("// v\n")
    (util / "cutlass" / "util").mkdir(parents=True)
    header = util / "cutlass" / "util" / "packed_stride.hpp"
    toolchain = dataclasses.replace(fake_toolchain, cutlass_include=include)
    fingerprints = []
    for text in ("// one\n", "// two\n"):
        header.write_text(text)
        build._cached_tree_digest.cache_clear()
        p = plan(tiny(), TINY_SETS["a"], out_root=tmp_path / "gen", toolchain=toolchain, cutlass=None)
        fingerprints.append((p.fingerprint, [c.fingerprint for c in p.compiles]))
    assert fingerprints[0][0] != fingerprints[1][0]
    assert not set(fingerprints[0][1]) & set(fingerprints[1][1])


@pytest.mark.nvcc
def test_the_toolchain_identity_sees_what_nvcc_reads_beyond_its_version(monkeypatch):
    """NVCC_APPEND_FLAGS (e.g. -G) changes every object nvcc writes: it must change the key too."""
    nvcc = build.find_toolchain().nvcc
    plain = build.toolchain_identity.__wrapped__(nvcc)
    assert build.toolchain_identity.__wrapped__(nvcc) == plain  # stable: no temporary names, no times
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-G")
    assert build.toolchain_identity.__wrapped__(nvcc) != plain


def test_loading_a_library_another_generator_built_warns(tmp_path, fake_toolchain, monkeypatch):
    """A build from before an edit to moegen's generator still loads, but says it is stale."""
    import warnings

    from moegen import dispatch, runtime
    built = run(tiny(), TINY_SETS["a"], tmp_path / "gen", fake_toolchain)
    out = built.plan.out_dir
    for generator, stale in ((runtime._generator(), False), ("0" * 64, True)):
        monkeypatch.setattr(runtime, "_generator", lambda g=generator: g)
        dispatch._warned.clear()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with pytest.raises(runtime.LoadError):  # no GPU here (or not this fake library's): after the checks
                runtime.load(out, spec=tiny(), device="cpu")
        said = [str(w.message) for w in seen if "another version of moegen's generator" in str(w.message)]
        assert bool(said) == stale and all(str(out) in s for s in said)


def test_objects_and_the_library_reach_the_disk_before_the_manifest_names_them(tmp_path, fake_toolchain, monkeypatch):
    """After a power loss the manifest never names an empty library or object."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", str(b))), real_replace(a, b))[1])
    built = run(tiny(), TINY_SETS["a"], tmp_path / "gen", fake_toolchain)
    out, store = built.plan.out_dir, tmp_path / "gen" / ".objects"
    manifest_at = events.index(("replace", str(out / "manifest.json")))
    lib = str(out / built.plan.library)
    assert events.index(("replace", lib)) < manifest_at
    assert any(e[0] == "fsync" and e[1].endswith(".tmp") and built.plan.library in e[1] for e in events[:events.index(("replace", lib))])
    assert ("fsync", str(out)) in events[events.index(("replace", lib)):manifest_at]
    for c in built.plan.compiles:
        i = events.index(("replace", str(store / c.obj)))
        assert any(e[0] == "fsync" and Path(e[1]).name.startswith(f".{c.obj}.") and ".log" not in e[1]
                   and ".sha256" not in e[1] for e in events[:i]), c.obj


def test_a_bad_object_store_leaves_no_output_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = dataclasses.replace(plan(out_root=tmp_path / "out"), store=blocker / "objs")
    with pytest.raises(build.BuildError, match="object store"):
        build.run_build(p, jobs=1, log=lambda m: None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field, value", [("kernels", []), ("kernels", [{"name": "moegen_sm90_gemm1_m64n8k64s4"}]),
                                          ("variant", "other"), ("arch", "sm100")])
def test_an_edited_manifest_is_refused_by_its_library(tmp_path, fake_toolchain, field, value):
    """The manifest's variant, arch and kernel table must be what the library embeds: an edit keeps the
    library's sha256, so that alone would not catch it."""
    out = run(tiny(), TINY_SETS["a"], tmp_path / "gen", fake_toolchain).plan.out_dir
    verify_library(read_manifest(out))
    data = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(dict(data, **{field: value})))
    with pytest.raises(ArtifactError, match=rf"manifest.json: field '{field}' = .*which its library embeds"):
        verify_library(read_manifest(out))
