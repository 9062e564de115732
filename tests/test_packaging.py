"""A wheel (what `pip install .` installs) carries everything a build needs: the arch package, the model
specs, the shipped dispatch tables and the templates with their headers, found without a checkout."""
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

def _can_build_wheels() -> bool:
    """setuptools, and its bdist_wheel (built in from 70.1, the `wheel` package before)."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    import setuptools
    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


pytestmark = pytest.mark.skipif(not _can_build_wheels(),
                                reason="building a wheel without build isolation needs setuptools >= 70.1 or wheel")

LIST_MODELS = r"""
import moegen
from moegen import render
from moegen.kernel_sets import resolve_kernels
for name in moegen.spec.known_models():
    spec = moegen.load_model(name)
    kernels = resolve_kernels(spec, "sm90", "default")
    render.layer_source(spec, "sm90", kernels)
    print(name, ",".join(c.name for c in kernels))
"""
INSTALLED_CHECK = r"""
from pathlib import Path
import moegen, moegen.paths as paths
from moegen import render
assert Path(moegen.__file__).parent == paths.PACKAGE_DIR and paths.installed_as_wheel()
assert paths.DEFAULT_OUT == Path("generated")  # under the working directory, not site-packages
assert (render.INCLUDE_DIR / "moegen" / "sm90" / "grouped_gemm.cuh").is_file()
""" + LIST_MODELS


def test_wheel_installs_a_working_generator(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("moegen", "configs", "templates"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "wheel"), str(src)], check=True, cwd=tmp_path, capture_output=True)
    wheel, = (tmp_path / "wheel").glob("moegen-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "configs", "templates", "moegen"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    expected = {f"moegen/{path}" if not path.startswith("moegen/") else path for path in tracked}
    assert sorted(expected - names) == []
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    run = tmp_path / "elsewhere"
    run.mkdir()
    out = subprocess.run([sys.executable, "-c", INSTALLED_CHECK], cwd=run, env={"PYTHONPATH": str(target),
                         "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    in_checkout = subprocess.run([sys.executable, "-c", LIST_MODELS], cwd=ROOT, capture_output=True, text=True)
    assert in_checkout.returncode == 0, in_checkout.stderr
    assert out.stdout == in_checkout.stdout  # the same specs and the same default kernels
    assert list(run.iterdir()) == []
