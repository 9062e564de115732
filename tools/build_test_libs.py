"""Build the GPU tests' libraries (every variant of tests/test_gpu_layer.py) in parallel processes.

tools/gpu_check.sh runs this before the tests so that their builds use all cores at once; the tests
themselves would build each variant on first use, one at a time.
"""
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def build_variant(variant: str) -> str:
    from test_gpu_layer import OUT, _spec, gpu_test_configs  # the tests' own variants, kernels, folder
    from moegen.build import build
    spec = _spec(variant)
    build(spec, "sm90", gpu_test_configs(spec), OUT, jobs=4, log=lambda m: None)
    return variant


if __name__ == "__main__":
    from test_gpu_layer import VARIANTS
    with ProcessPoolExecutor(len(VARIANTS)) as pool:
        for v in pool.map(build_variant, VARIANTS):
            print("built", v, flush=True)
