"""The GPU tests' model variants, their kernels and build folder: importable without a GPU, so
tools/build_test_libs.py can build the tests' libraries on any machine (and carry them)."""
from pathlib import Path

from moegen.cli import DEFAULT_OUT
from moegen.config_space import (SM90_BLOCK_M, KernelConfig, default_configs, gemm_shapes, rejection_reason,
                                  two_ctas_per_sm)
from moegen.spec import ModelSpec, load_model

OUT = DEFAULT_OUT / "_gputest"  # the tests' own builds, apart from what users build and tune
VARIANTS = {
    "deepseek-v4-flash": dict(),
    "deepseek-v3": dict(),
    "gpt-oss-120b": dict(),
    "gpt-oss-20b": dict(),
    "qwen3-30b-a3b": dict(),
    "gpt-oss-20b-tp2": dict(model="gpt-oss-20b", tp_size=2),  # I_local 1440: K not a multiple of 64
    "qwen3-30b-a3b-ep1of4": dict(model="qwen3-30b-a3b", ep_size=4, ep_rank=1),
    # groups of 8 experts: routing's shared-memory group scores (the models above score by registers)
    "grouped-64e": dict(model=str(Path(__file__).parent / "specs" / "grouped-64e.yaml")),
}


def variant_spec(variant: str) -> ModelSpec:
    v = dict(VARIANTS[variant])
    spec = load_model(v.pop("model", variant))
    return spec.with_parallel(**v) if v else spec


def gpu_test_configs(spec: ModelSpec) -> list[KernelConfig]:
    """The default kernels plus, per GEMM, one of each block_m the defaults leave out (where the
    shape admits it) and a two-CTAs-per-SM tile, so every mainloop variant (1, 2 or 4 slices; one or
    two CTAs per SM) runs against the reference."""
    configs = default_configs(spec, "sm90")
    shapes = gemm_shapes(spec)
    for gemm, shape in shapes.items():
        for block_m in SM90_BLOCK_M:
            if any(c.gemm == gemm and c.block_m == block_m for c in configs):
                continue
            extra = KernelConfig("sm90", gemm, block_m, 64, 64, 4)
            if rejection_reason(extra, shape) is None:
                configs.append(extra)
        # two CTAs per SM (setmaxnreg 32 / 104 instead of 56 / 224): its own register split
        if not any(c.gemm == gemm and two_ctas_per_sm(c) for c in configs):
            extra = KernelConfig("sm90", gemm, 128, 32, 64, 4)
            if rejection_reason(extra, shape) is None:
                configs.append(extra)
    return configs
