"""The SM100 layer's own code on the local GPU, with its GEMMs stood in for (marker gpu).

No SM100 GPU has run the SM100 build.  Its CUTLASS GEMMs need one, but everything around them is plain
CUDA: routing, the scale rows, the MXFP8 quantizers (gather, and SwiGLU of GEMM1's rows), finalize with
the routing weights and GEMM2's bias, the workspace carving and the launch sequence (sm100/pipeline.cuh),
and the C ABI and runtime around it.  This test builds the SM100 layer exactly as `moegen build --arch
sm100` plans it, except that in the two GEMM units only CUTLASS's kernel is replaced: each unit still
carves its device arrays and fills them (fill_group_args), and a CUDA-core GEMM computes every group from
those arrays alone, through CUTLASS's own strides and scale layouts (tests/helpers/sm100_standin_gemm.cuh);
everything compiles for the GPU at hand.  It then loads the library with moegen.load and runs `moegen
check` on it (poisoned outputs, T = 0, odd sizes, skewed routing, the experts-only entry point, CUDA-graph
replay) against the float64 reference in the MXFP8 activation format.
"""
import json
import os
import shutil
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


def standin_source(config) -> str:
    tile = f"moegen::sm100::GroupedGemm<{config.block_m}, {config.block_n}, {config.block_k}>"
    return (f'#include "sm100_standin_gemm.cuh"\n'
            f'extern "C" int {config.name}_launch(const moegen::sm100::GroupedGemmArgs* a, cudaStream_t stream) {{\n'
            f'  return moegen_test::standin_grouped_gemm<{tile}>(*a, stream);\n}}\n')


def write_standin_sources(spec, root: Path):
    """The SM100 build's plan for `spec`, its sources written with the GEMM units replaced."""
    configs = {c.name: c for c in get_arch("sm100", spec.activations).fallback_configs(spec)}
    plan = plan_build(spec, "sm100", list(configs.values()), root, find_toolchain())
    for name, text in plan.sources.items():
        path = plan.out_dir / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(standin_source(configs[name[:-3]]) if name[:-3] in configs else text)
    return plan, set(configs)


def compile_step(out: Path, step, gencode: str) -> Path:
    sm100_gencode = get_arch("sm100").gencode
    command = [gencode if flag == sm100_gencode else flag for flag in step.command]
    run = subprocess.run([*command, f"-I{HELPERS}", "-o", f"{step.name}.o"], cwd=out, capture_output=True, text=True)
    assert run.returncode == 0, f"{step.name}: {run.stderr[-3000:]}"
    return out / f"{step.name}.o"


def link_standin(plan, gencode: str, capability: tuple[int, int]) -> Path:
    out = plan.out_dir
    link = [plan.link_command[0], "-shared", gencode, *LINK_FLAGS, *(f"-L{d}" for d in find_toolchain().lib_dirs),
            "-o", plan.library, *(f"{step.name}.o" for step in plan.compiles)]
    run = subprocess.run(link, cwd=out, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    manifest = dict(plan.manifest, compute_capability=list(capability), library_sha256=file_sha256(out / plan.library),
                    resources={})
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Each variant's stand-in build dir, compiled for the local GPU."""
    root = tmp_path_factory.mktemp("sm100_standin")
    capability = torch.cuda.get_device_capability()
    gencode = f"-gencode=arch=compute_{capability[0]}{capability[1]}a,code=sm_{capability[0]}{capability[1]}a"
    plans = {name: write_standin_sources(load_model(model).with_parallel(**split) if split else load_model(model), root)
             for name, (model, split) in VARIANTS.items()}
    # A GEMM unit holds only its tile, so one object serves every variant with that tile.
    units = {}
    for plan, gemms in plans.values():
        for step in plan.compiles:
            units.setdefault(step.name if step.name in gemms else (plan.out_dir, step.name), (plan.out_dir, step))
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        objects = dict(zip(units, pool.map(lambda unit: compile_step(*unit, gencode), units.values())))
    for plan, gemms in plans.values():
        for name in gemms:
            if objects[name].parent != plan.out_dir:
                shutil.copyfile(objects[name], plan.out_dir / f"{name}.o")
    return {name: link_standin(plan, gencode, capability) for name, (plan, _) in plans.items()}


@pytest.mark.parametrize("variant", VARIANTS)
def test_sm100_layer_around_standin_gemms_passes_check(builds, variant):
    layer = load(builds[variant])
    assert layer.manifest.arch == "sm100" and layer.manifest.activation_format == "mxfp8"
    lines = []
    ok = check_library(layer, TOKENS, seed=SEED, log=lines.append)
    print("\n".join(lines))
    assert ok, "\n".join(line for line in lines if not line.startswith("PASS"))
