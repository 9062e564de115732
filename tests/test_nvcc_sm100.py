"""A real SM100 build of a tiny layer (marker nvcc; no GPU: compile-verified, the library loads with
ctypes): CUTLASS's block-scaled grouped GEMM on one SM and on a 2-SM pair, the layer's MXFP8
pipeline, and, where cuobjdump is installed (the `sass` extra), tcgen05 MMAs in every GEMM kernel."""
import json

import pytest

from moegen import artifact, binding, build
from moegen.build import BuildError
from moegen.naming import KernelConfig
from moegen.spec import model_from_dict

pytestmark = pytest.mark.nvcc

TINY = model_from_dict({"name": "tiny", "num_experts": 8, "hidden_size": 256, "intermediate_size": 160,
                        "router": {"kind": "topk_softmax", "top_k": 2},
                        "activation": {"kind": "swiglu_oai", "alpha": 1.702, "limit": 7.0},
                        "bias": {"gemm1": True, "gemm2": True}}, "tiny.yaml")  # I = 160: K padded to 256
CONFIGS = [KernelConfig("sm100", "gemm1", 128, 64, 128, 0), KernelConfig("sm100", "gemm2", 256, 128, 128, 0)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    try:
        toolchain = build.find_toolchain()
    except BuildError as e:
        pytest.skip(str(e))
    root = tmp_path_factory.mktemp("generated")
    result = build.build(TINY, "sm100", CONFIGS, root, jobs=2, log=lambda m: None, toolchain=toolchain)
    return result, json.loads((result.plan.out_dir / "manifest.json").read_text())


def test_manifest_says_what_the_kernels_consume(built):
    result, m = built
    assert m["arch"] == "sm100" and m["compute_capability"] == [10, 0]
    assert m["weight_layout"] == "sm100_e2m1_sf128x4" and m["activation_format"] == "mxfp8"
    assert "-gencode=arch=compute_100a,code=sm_100a" in m["toolchain"]["flags"]
    for name in (c.name for c in CONFIGS):
        res = m["resources"][name]
        assert res["max_registers"] > 0 and res["spill_bytes"] == 0 and res["stack_bytes"] == 0, res


def test_library_loads_and_its_abi_matches(built):
    result, m = built
    lib = binding.Library(result.plan.out_dir / m["library"])
    assert lib.kernel_names() == [c.name for c in CONFIGS]
    assert lib.build_info()["fingerprint"] == m["fingerprint"]
    assert lib.workspace_bytes(0) > 0 and lib.workspace_bytes(lib.max_tokens + 1) == 0


def test_every_gemm_kernel_issues_tcgen05_mma(built):
    from moegen.sass import audit_build, find_cuobjdump
    try:
        find_cuobjdump()
    except RuntimeError as e:
        pytest.skip(str(e))
    ok, report = audit_build(built[0].plan.out_dir)
    assert ok, report
    assert "UTCQMMA" in report and "NO UTCQMMA" not in report


def test_manifest_round_trips(built):
    m = artifact.read_manifest(built[0].plan.out_dir)
    assert m.arch == "sm100" and m.kernels == tuple(c.name for c in CONFIGS)
