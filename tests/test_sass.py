"""The SASS audit's reading of cuobjdump output and of ptxas's report in the manifest (no toolkit needed)."""
from pathlib import Path

from moegen.artifact import Manifest
from moegen.sass import ptxas_findings, summarize
from moegen.spec import load_model

SASS = """
	code for sm_100a
		Function : _ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalILi1EEEEEvT_
	.headerflags	@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM100)"
        /*0000*/                   LDC R1, c[0x0][0x37c] ;                  /* 0x0000df00ff017b82 */
        /*0010*/                   UTCQMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ; /* 0x0000000a04007ea7 */
	code for sm_100a
		Function : _ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalILi1EEEEEvT_
        /*0000*/                   UTCQMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR11], UPT ; /* 0x0000000a04007ea7 */
        /*0010*/                   STL [R1], R2 ;                            /* 0x0000000201007387 */
		Function : _ZN6moegen15finalize_kernelEv
        /*0000*/                   LDL R2, [R1] ;                            /* 0x0000000001027983 */
"""


def test_a_kernel_in_two_cubins_counts_twice_and_local_memory_is_seen():
    kernels = summarize(SASS, ("UTCQMMA",))
    gemm = [k for k in kernels if "GemmUniversal" in k]
    assert len(gemm) == 2 and gemm[1].endswith("(copy 2)")
    assert [kernels[k]["MMA"] for k in gemm] == [1, 1]
    assert kernels[gemm[0]]["STL"] == 0 and kernels[gemm[1]]["STL"] == 1
    assert kernels["_ZN6moegen15finalize_kernelEv"] == {"MMA": 0, "LDL": 1, "STL": 0, "instructions": 1}


def test_ptxas_findings_fail_on_local_memory_and_unexpected_serialization_only():
    clean = dict(max_registers=64, spill_bytes=0, stack_bytes=0, wgmma_serialized=0)
    resources = {
        "layer": clean,
        "moegen_sm90_gemm1_m64n8k128s4": clean,
        "moegen_sm90_gemm1_m64n32k64s4": dict(clean, wgmma_serialized=1),  # the config space expects it
        "moegen_sm90_gemm2_m64n8k128s4": dict(clean, wgmma_serialized=2),  # it does not
        "moegen_sm90_gemm1_m256n64k128s4": dict(clean, spill_bytes=140, stack_bytes=32),
    }
    m = Manifest(Path("build/manifest.json"), "f" * 64, "deepseek-v4-flash", "sm90",
                 load_model("deepseek-v4-flash").to_dict(), (), "lib.so", "0" * 64, "sm90-mxfp4", "bf16",
                 {"resources": resources})
    findings = ptxas_findings(m)
    failing = [line for line, fails in findings if fails]
    assert len(findings) == 4 and len(failing) == 3
    assert any("m64n32k64s4" in line and "expected" in line for line, fails in findings if not fails)
    assert any("gemm2_m64n8k128s4" in line and "NOT EXPECTED" in line for line in failing)
    assert "ptxas spilled 140 bytes in moegen_sm90_gemm1_m256n64k128s4" in failing
    assert any("32-byte stack frame" in line for line in failing)


def test_an_odd_manifest_is_a_one_line_error_naming_it(tmp_path):
    import dataclasses
    import json

    import pytest

    from moegen.artifact import ArtifactError
    from moegen.sass import audit_build

    spec = load_model("deepseek-v4-flash").to_dict()
    m = Manifest(tmp_path / "manifest.json", "f" * 64, "deepseek-v4-flash", "sm90", spec, (), "lib.so", "0" * 64,
                 "sm90-mxfp4", "bf16", {"resources": [1]})
    with pytest.raises(ArtifactError, match="manifest.json: field 'resources' = \\[1\\]: expected an object"):
        ptxas_findings(m)
    bad_spec = dataclasses.replace(m, spec=dict(spec, num_experts="x"), data={})
    with pytest.raises(ValueError, match=f"^{tmp_path / 'manifest.json'}: field 'num_experts'"):
        ptxas_findings(bad_spec)
    manifest = dict(schema=1, kernels=[], library="libmoegen-0.so", fingerprint="f", variant="v", arch="sm80",
                    spec=spec, library_sha256="0", weight_layout="x", activation_format="bf16")
    from moegen.artifact import MANIFEST_SCHEMA
    manifest["schema"] = MANIFEST_SCHEMA
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="fields 'arch', 'activation_format' = 'sm80', 'bf16': expected one of"):
        audit_build(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps(dict(manifest, arch="sm90")))
    with pytest.raises(ArtifactError, match="libmoegen-0.so: library named by .* is missing; rebuild"):
        audit_build(tmp_path)
    # a library built for another spec is refused before its machine code is read
    other = load_model("deepseek-v3")
    with pytest.raises(ArtifactError, match="built for v, but the spec given differs at 'activation': built"):
        audit_build(tmp_path, other)
    # a ptxas record of the wrong kind is named, not printed as if it were one
    for value in ("xx", [1], -2, True):
        odd = dataclasses.replace(m, data={"resources": {"k": {"spill_bytes": value}}})
        with pytest.raises(ArtifactError, match=r"field 'resources.k.spill_bytes' = .*: expected an integer >= 0"):
            ptxas_findings(odd)
