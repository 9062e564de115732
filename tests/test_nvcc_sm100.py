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


def test_scratch_holds_every_tiles_arrays_and_workspace(tmp_path):
    """The layer reserves sm100::scratch_bytes_bound(local experts) per GEMM for its device arrays and
    CUTLASS's workspace; a launch needing more fails by name, only on a B200.  Host code alone (no GPU):
    every tile of the SM100 space, from 1 to 1024 local experts, at a B200's 148 SMs and at 256."""
    import subprocess
    from moegen.arch import get_arch
    from moegen.render import INCLUDE_DIR
    from moegen.spec import known_models, load_model
    try:
        toolchain = build.find_toolchain()
    except BuildError as e:
        pytest.skip(str(e))
    tiles = sorted({(c.block_m, c.block_n, c.block_k) for m in known_models()
                    for c in get_arch("sm100").candidate_configs(load_model(m))})
    calls = " | ".join(f"probe<{m}, {n}, {k}>(groups, sms)" for m, n, k in tiles)
    (tmp_path / "probe.cu").write_text(f"""#include <cstdio>
#include "moegen/sm100/grouped_gemm.cuh"
template <int BM, int BN, int BK>
int probe(int groups, int sms) {{
  using G = moegen::sm100::GroupedGemm<BM, BN, BK>;
  typename G::Arrays arr{{}};
  static uint8_t base[256];
  const size_t arrays = moegen::sm100::carve_arrays<G>(arr, base, groups);
  const size_t workspace = G::Gemm::get_workspace_size(moegen::sm100::gemm_arguments<G>(arr, groups, 0, sms));
  const size_t bound = moegen::sm100::scratch_bytes_bound(groups);
  std::printf("m%dn%dk%d groups %d sms %d: %zu + %zu <= %zu\\n", BM, BN, BK, groups, sms, arrays, workspace, bound);
  return arrays + workspace <= bound ? 0 : 1;
}}
int main() {{
  int bad = 0;
  for (int groups : {{1, 32, 256, 1024}})
    for (int sms : {{148, 256}}) bad |= {calls};
  return bad;
}}
""")
    cutlass = toolchain.cutlass_include
    compiled = subprocess.run([toolchain.nvcc, "-std=c++17", "-O1", "-arch=sm_100a", "--expt-relaxed-constexpr",
                               f"-I{INCLUDE_DIR}", f"-I{cutlass}", f"-I{cutlass.parent / 'tools' / 'util' / 'include'}",
                               *(f"-L{d}" for d in toolchain.lib_dirs), "probe.cu", "-o", "probe"],
                              cwd=tmp_path, capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    ran = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True)
    print(ran.stdout)
    assert ran.returncode == 0 and ran.stdout.count("\n") == 4 * 2 * len(tiles), ran.stdout + ran.stderr
