"""Build the GPU tests' libraries (every variant in tests/gpu_variants.py) in parallel processes.

tools/gpu_check.sh runs this before the tests so that their builds use all cores at once; the tests
themselves would build each variant on first use, one at a time.  `--sequential` builds one variant
at a time (a 2-core machine; tools/stage_carry.sh then carries the libraries to the device);
`--w4a8` builds only the W4A8 variants, `--bf16` only the others.
"""
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's moegen, whatever else is installed


def build_variant(variant: str, jobs: int = 4) -> str:
    from gpu_variants import OUT, STORE, gpu_test_configs, variant_spec  # the tests' variants, kernels, folders
    from moegen.build import build
    spec = variant_spec(variant)
    build(spec, "sm90", gpu_test_configs(variant), OUT, jobs=jobs, log=lambda m: None, store=STORE)
    return variant


if __name__ == "__main__":
    from gpu_variants import VARIANTS, W4A8_VARIANTS
    variants = ([*W4A8_VARIANTS] if "--w4a8" in sys.argv else [*VARIANTS] if "--bf16" in sys.argv
                else [*VARIANTS, *W4A8_VARIANTS])
    if "--sequential" in sys.argv:  # a small machine: one variant at a time, two nvcc processes
        for v in variants:
            print("built", build_variant(v, jobs=2), flush=True)
    else:
        with ProcessPoolExecutor(len(variants)) as pool:
            for v in pool.map(build_variant, variants):
                print("built", v, flush=True)
