"""A machine without a CUDA toolkit builds with the `nvcc` extra's wheels: a real build of a tiny
layer with the system toolkit hidden from the PATH and the environment (marker nvcc)."""
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.nvcc

# this environment's site-packages (a venv's python is a symlink: its resolved path is the base install)
WHEEL_NVCC = sorted(Path(sysconfig.get_paths()["purelib"]).glob("nvidia/cu13/bin/nvcc"))
if not WHEEL_NVCC:
    pytest.skip("the nvcc extra is not installed (pip install -e '.[nvcc]')", allow_module_level=True)

SCRIPT = textwrap.dedent("""
    import shutil, sys
    from pathlib import Path
    from moegen import build
    from moegen.naming import KernelConfig
    from moegen.spec import model_from_dict
    assert shutil.which("nvcc") is None, shutil.which("nvcc")
    toolchain = build.find_toolchain()
    print("nvcc:", toolchain.nvcc)
    spec = model_from_dict({"name": "tiny", "num_experts": 8, "hidden_size": 256, "intermediate_size": 128,
                            "router": {"kind": "softmax_topk", "top_k": 2}, "activation": {"kind": "swiglu"}})
    configs = [KernelConfig("sm90", "gemm1", 64, 8, 64, 3), KernelConfig("sm90", "gemm2", 64, 8, 64, 3)]
    result = build.build(spec, "sm90", configs, Path(sys.argv[1]), jobs=2, log=print, toolchain=toolchain)
    print("built", result.plan.out_dir / result.plan.library)
""")


def test_build_with_the_wheel_toolchain_and_no_system_cuda(tmp_path):
    # PATH without any directory holding an nvcc, and no CUDA_HOME / CUDA_PATH
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "nvcc").exists() and "cuda" not in d.lower()]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA") and k != "PATH"}
    env.update(PATH=os.pathsep.join(path), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "out")], env=env, capture_output=True,
                         text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    nvcc = next(line for line in run.stdout.splitlines() if line.startswith("nvcc:")).split(": ", 1)[1]
    assert "site-packages" in nvcc and "nvidia" in nvcc
    assert list((tmp_path / "out" / "tiny" / "sm90").glob("libmoegen-*.so"))
