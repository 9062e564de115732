"""Audit of a built library's machine code (cuobjdump --dump-sass): every GEMM kernel issues the
arch's tensor-core MMA, no kernel touches local memory (spills or stack arrays), and no kernel has
wgmmas that ptxas serialized where the config space does not expect it (from the build's resources)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .arch import serialization_note
from .artifact import ArtifactError, Manifest, built_spec, read_manifest, verify_library
from .problem import gemm_shapes
from .spec import ModelSpec, model_from_dict, shown

# The tensor-core MMA each arch's GEMM kernels must contain, by (arch, activation format) (SM90 W4A8:
# FP8 wgmma is QGMMA; SM100: tcgen05.mma kind::mxf8f6f4 is UTCQMMA, .2CTA on a 2-SM pair), and how
# their kernels' names read.
MMA_OPCODES = {("sm90", "bf16"): ("HGMMA",), ("sm90", "fp8"): ("QGMMA",), ("sm100", "mxfp8"): ("UTCQMMA",)}
GEMM_KERNEL = {"sm90": "grouped_gemm_kernel", "sm100": "GemmUniversal"}


def _tool(name: str) -> str | None:
    path = shutil.which(name)
    if path:
        return path
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
        return find_nvidia_binary_utility(name)
    except ImportError:
        return None


def find_cuobjdump() -> tuple[str, dict]:
    """cuobjdump (the CUDA toolkit, or the `sass` extra's wheels) and the environment it needs to
    find nvdisasm."""
    path = _tool("cuobjdump")
    if not path:
        raise RuntimeError("cuobjdump not found: the SASS audit reads the library's machine code (CUDA toolkit, "
                           "or pip install -e '.[sass]')")
    env = dict(os.environ)
    nvdisasm = _tool("nvdisasm")
    if nvdisasm:
        env.setdefault("NVDISASM_PATH", nvdisasm)
    return path, env


def summarize(sass: str, mma_opcodes: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Per kernel: MMA, LDL, STL and instruction counts.  A kernel in several cubins is listed once
    per cubin (SM100's gemm1 and gemm2 of one tile are the same CUTLASS kernel, in two units)."""
    kernels, name = {}, None
    ops = (*mma_opcodes, "LDL", "STL")
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name, copy = m.group(1), 1
            while name in kernels:
                copy += 1
                name = f"{m.group(1)} (copy {copy})"
            kernels[name] = {"MMA": 0, "LDL": 0, "STL": 0, "instructions": 0}
            continue
        if name and re.search(r"/\*[0-9a-f]{4,}\*/", line):
            k = kernels[name]
            k["instructions"] += 1
            for op in ops:
                if re.search(rf"\b{op}(\.|\s|\b)", line):
                    k["MMA" if op in mma_opcodes else op] += 1
    return kernels


RESOURCE_COUNTS = ("max_registers", "spill_bytes", "stack_bytes", "wgmma_serialized")  # build.ptxas_resources' record


def ptxas_findings(m: Manifest) -> list[tuple[str, bool]]:
    """What ptxas reported for the build's kernels (its manifest's resources), each line with whether it
    fails the audit: spills and stack frames (local memory) always, serialized wgmmas only where the
    arch's config space does not expect them.  Silent slowdowns: no output comparison sees them."""
    shapes = gemm_shapes(model_from_dict(m.spec, str(m.path)))
    found = []
    resources = m.data.get("resources", {})
    if not isinstance(resources, dict) or not all(isinstance(r, dict) for r in resources.values()):
        raise ArtifactError(f"{m.path}: field 'resources' = {shown(resources)}: expected an object of per-kernel "
                            "ptxas records; rebuild")
    for kernel, res in resources.items():
        for key in RESOURCE_COUNTS:
            value = res.get(key, 0)
            if type(value) is not int or value < 0:
                raise ArtifactError(f"{m.path}: field 'resources.{kernel}.{key}' = {shown(value)}: expected an "
                                    "integer >= 0; rebuild")
    for kernel, res in sorted(resources.items()):
        if res.get("wgmma_serialized"):
            note = serialization_note(kernel, shapes)
            found.append((f"ptxas serialized the wgmmas of {kernel} (C751x x{res['wgmma_serialized']}; {note})",
                          not note.startswith("expected")))
        found += [(line, True) for line in local_memory_findings(kernel, res)]
    return found


def local_memory_findings(kernel: str, res: dict) -> list[str]:
    """What one kernel's ptxas record (a manifest's resources entry) says about local memory: spills
    and a stack frame.  `moegen sass` fails a library holding any, so the tuner passes such kernels over."""
    found = []
    if res.get("spill_bytes"):
        found.append(f"ptxas spilled {res['spill_bytes']} bytes in {kernel}")
    if res.get("stack_bytes"):
        found.append(f"{kernel} has a {res['stack_bytes']}-byte stack frame (local memory)")
    return found


def audit_build(out_dir: Path, spec: ModelSpec | None = None) -> tuple[bool, str]:
    """spec: the one the library must have been built for (ArtifactError otherwise)."""
    m = read_manifest(out_dir)
    if spec is not None:
        built_spec(m, spec)
    if (m.arch, m.activation_format) not in MMA_OPCODES:
        raise ArtifactError(f"{m.path}: fields 'arch', 'activation_format' = {shown(m.arch)}, "
                            f"{shown(m.activation_format)}: expected one of {sorted(MMA_OPCODES)}; rebuild")
    verify_library(m)  # the SASS audited is the library the manifest describes
    opcodes = MMA_OPCODES[(m.arch, m.activation_format)]
    cuobjdump, env = find_cuobjdump()
    sass = subprocess.run([cuobjdump, "--dump-sass", str(m.library_path)], capture_output=True, text=True,
                          check=False, env=env)
    if sass.returncode != 0:
        raise RuntimeError(f"cuobjdump --dump-sass {m.library_path}: {sass.stderr.strip()}")
    kernels = summarize(sass.stdout, opcodes)
    ok, lines = bool(kernels), []
    for name, k in sorted(kernels.items()):
        flag = ""
        if GEMM_KERNEL[m.arch] in name and k["MMA"] == 0:
            flag, ok = f" <-- NO {'/'.join(opcodes)}", False
        if k["LDL"] or k["STL"]:
            flag, ok = flag + " <-- LOCAL MEMORY", False
        short = name if len(name) < 110 else name[:107] + "..."
        lines.append(f"{short}: {opcodes[0]} {k['MMA']}, LDL {k['LDL']}, STL {k['STL']}, {k['instructions']} "
                     f"instructions{flag}")
    gemms = sum(1 for name in kernels if GEMM_KERNEL[m.arch] in name)
    if gemms < len({k for k in m.kernels}):  # every GEMM unit of the build must be there
        lines.append(f"only {gemms} GEMM kernels in the SASS for {len(m.kernels)} in the manifest")
        ok = False
    for line, fails in ptxas_findings(m):
        lines.append(line)
        ok = ok and not fails
    lines.append(f"{m.library_path}: {len(kernels)} kernels, {'OK' if ok else 'FAILED'}")
    return ok, "\n".join(lines)
