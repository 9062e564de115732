"""The SM100 layer's own code on the local GPU, with its GEMMs stood in for (marker gpu).

No SM100 GPU has run the SM100 build.  Its CUTLASS GEMMs need one, but everything around them is plain
CUDA: routing, the scale rows, the MXFP8 quantizers (gather, and SwiGLU of GEMM1's rows), finalize with
the routing weights and GEMM2's bias, the workspace carving and the launch sequence (sm100/pipeline.cuh),
and the C ABI and runtime around it.  This test builds the SM100 layer exactly as `moegen build --arch
sm100` plans it, except that the two GEMM units are replaced by a CUDA-core GEMM with the same launch
contract and operand layouts (tests/helpers/sm100_standin_gemm.cuh) and everything compiles for the GPU
at hand.  It then loads the library with moegen.load and runs `moegen check` on it (poisoned outputs,
T = 0, odd sizes, skewed routing, the experts-only entry point, CUDA-graph replay) against the float64
reference in the MXFP8 activation format.
"""
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from moegen.arch import get_arch
from moegen.artifact import MANIFEST_NAME, file_sha256
from moegen.build import LINK_FLAGS, find_toolchain, plan_build
from moegen.check import check_library
from moegen.runtime import load
from moegen.spec import load_model

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

HELPERS = Path(__file__).parent / "helpers"
SEED = int(os.environ["MOEGEN_TEST_SEED"])  # tests/conftest.py draws it and prints it in the header
TOKENS = [0, 1, 5, 33, 300, 1030]
# Biases and gpt-oss's clamped SwiGLU with K = 2880 padded to 2944; an EP rank of 256 experts (slots of
# other ranks' experts, DeepSeek-V4's router); a TP rank whose 192 intermediate columns pad GEMM2's K to 256.
VARIANTS = {
    "gpt-oss-20b": ("gpt-oss-20b", {}),
    "deepseek-v4-flash-ep1of8": ("deepseek-v4-flash", dict(ep_size=8, ep_rank=1)),
    "qwen3-30b-a3b-tp4": ("qwen3-30b-a3b", dict(tp_size=4)),
}


def standin_source(kernel: str) -> str:
    return (f'#include "sm100_standin_gemm.cuh"\n'
            f'extern "C" int {kernel}_launch(const moegen::sm100::GroupedGemmArgs* a, cudaStream_t stream) {{\n'
            f'  return moegen_test::standin_grouped_gemm(a, stream);\n}}\n')


def build_standin(spec, root: Path, capability: tuple[int, int]) -> Path:
    """The SM100 build's plan, its GEMM units replaced, compiled for `capability`; returns the build dir."""
    arch = get_arch("sm100", spec.activations)
    configs = arch.fallback_configs(spec)
    plan = plan_build(spec, "sm100", configs, root, find_toolchain())
    gencode = f"-gencode=arch=compute_{capability[0]}{capability[1]}a,code=sm_{capability[0]}{capability[1]}a"
    out = plan.out_dir
    for name, text in plan.sources.items():
        path = out / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        stem = name[:-3]
        path.write_text(standin_source(stem) if any(c.name == stem for c in configs) else text)

    def compile_one(step):
        command = [arch_flag if arch_flag != arch.gencode else gencode for arch_flag in step.command]
        run = subprocess.run([*command, f"-I{HELPERS}", "-o", f"{step.name}.o"], cwd=out, capture_output=True,
                             text=True)
        assert run.returncode == 0, f"{step.name}: {run.stderr[-3000:]}"

    with ThreadPoolExecutor(len(plan.compiles)) as pool:
        list(pool.map(compile_one, plan.compiles))
    link = [plan.link_command[0], "-shared", gencode, *LINK_FLAGS,
            *(f"-L{d}" for d in find_toolchain().lib_dirs), "-o", plan.library,
            *(f"{step.name}.o" for step in plan.compiles)]
    run = subprocess.run(link, cwd=out, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    manifest = dict(plan.manifest, compute_capability=list(capability), library_sha256=file_sha256(out / plan.library),
                    resources={})
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("sm100_standin")
    capability = torch.cuda.get_device_capability()
    specs = {name: load_model(model).with_parallel(**split) if split else load_model(model)
             for name, (model, split) in VARIANTS.items()}
    with ThreadPoolExecutor(len(specs)) as pool:
        dirs = dict(zip(specs, pool.map(lambda s: build_standin(s, root, capability), specs.values())))
    return dirs


@pytest.mark.parametrize("variant", VARIANTS)
def test_sm100_layer_around_standin_gemms_passes_check(builds, variant):
    layer = load(builds[variant])
    assert layer.manifest.arch == "sm100" and layer.manifest.activation_format == "mxfp8"
    lines = []
    ok = check_library(layer, TOKENS, seed=SEED, log=lines.append)
    print("\n".join(lines))
    assert ok, "\n".join(line for line in lines if not line.startswith("PASS"))
