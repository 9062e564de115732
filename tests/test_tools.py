"""The measurement tools keep working as the kernels change: tools/ablation.py patches exact source
strings of the GEMM header, tools/experiments/*.patch apply to it, the GPU-side scripts parse and the
standalone experiment programs compile (CPU only)."""
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ablation():
    spec = importlib.util.spec_from_file_location("ablation", ROOT / "tools" / "ablation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("variant", ["base", "nowiden", "nomma", "stream", "notokens", "stagger",
                                     "stream+notokens+stagger"])
def test_ablation_edits_apply_to_the_header(tmp_path, variant):
    ablation = _ablation()
    edits = ablation.variant_edits(variant)
    ablation.make_tree(tmp_path / variant, edits)
    header = (tmp_path / variant / ablation.HEADER).read_text()
    original = (ROOT / ablation.HEADER).read_text()
    assert (header == original) == (not edits)
    for old, new in edits:
        assert old not in header and new in header


def test_ablation_rejects_a_header_without_the_patched_code(tmp_path):
    ablation = _ablation()
    other = tmp_path / "other.cuh"
    other.write_text("// a header without the mainloop\n")
    with pytest.raises(SystemExit, match="update tools/ablation.py"):
        ablation.make_tree(tmp_path / "t", ablation.VARIANTS["nowiden"], other)


def test_ablation_rejects_an_unknown_variant():
    with pytest.raises(SystemExit, match="unknown variant 'nosuch'"):
        _ablation().variant_edits("stream+nosuch")


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")
@pytest.mark.parametrize("patch", sorted((ROOT / "tools" / "experiments").glob("*.patch")), ids=lambda p: p.name)
def test_experiment_patches_apply(tmp_path, patch):
    header = ROOT / "templates" / "include" / "moegen" / "sm90_mxfp4_grouped_gemm.cuh"
    out = tmp_path / "patched.cuh"
    run = subprocess.run(["patch", "-s", "-o", str(out), str(header), str(patch)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert out.read_text() != header.read_text()


@pytest.mark.parametrize("script", sorted((ROOT / "tools").glob("*.py")), ids=lambda p: p.name)
def test_tool_scripts_compile(script):
    """The GPU-side tools run only on the device machine: at least their syntax is checked here."""
    compile(script.read_text(), str(script), "exec")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("source", sorted((ROOT / "tools" / "experiments").glob("*.cu")), ids=lambda p: p.name)
def test_experiment_programs_compile(tmp_path, source):
    run = subprocess.run(["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-c", str(source),
                          "-o", str(tmp_path / "program.o")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
