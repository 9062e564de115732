"""Build: spec + configs -> one shared library with a C ABI, plus manifest.json.

``plan_build`` is a pure function of its inputs (spec, configs, toolchain, template and header
contents) and returns the whole plan: sources, compile commands, fingerprints.  ``run_build``
executes it: one nvcc process per translation unit, in parallel; objects are cached by content
fingerprint (never timestamps); the library is written under a fingerprinted name and
``manifest.json`` is replaced atomically last, so a reader sees either the old build or the new one.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

from . import render
from .config_space import KernelConfig, check_configs
from .spec import ModelSpec

MANIFEST_SCHEMA = 1
ABI_VERSION = 1  # templates/include/moegen/abi.h MOEGEN_ABI_VERSION
ARCH_GENCODE = {"sm90": "-gencode=arch=compute_90a,code=sm_90a"}
BASE_FLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-Xcompiler=-fPIC",
              "-Xptxas=-v", "-lineinfo")


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    nvcc_version: str
    cutlass_include: Path
    cutlass_version: str


@dataclass(frozen=True)
class CompileStep:
    name: str  # kernel name, or "layer"
    source: str  # file name under src/
    obj: str  # file name under obj/ (fingerprinted)
    command: tuple[str, ...]  # relative to the output directory
    fingerprint: str


@dataclass(frozen=True)
class BuildPlan:
    out_dir: Path
    sources: dict[str, str]  # src/ file name -> text (generated sources, and include/ the headers they use)
    compiles: tuple[CompileStep, ...]
    link_command: tuple[str, ...]
    library: str  # file name in out_dir
    manifest: dict
    fingerprint: str


@dataclass
class BuildResult:
    plan: BuildPlan
    compiled: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    up_to_date: bool = False
    resources: dict = field(default_factory=dict)  # kernel -> ptxas registers / spills


def _sha(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def tree_digest(root: Path, suffixes=(".h", ".hpp", ".cuh", ".inl", ".j2")) -> str:
    """Content hash of every header/template below root (paths and bytes, sorted)."""
    h = hashlib.sha256()
    for p in sorted(x for x in root.rglob("*") if x.is_file() and x.suffix in suffixes):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


@lru_cache(maxsize=None)
def _cached_tree_digest(root: Path) -> str:
    return tree_digest(root)


_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def included_files(text: str, include_dir: Path, sources: dict[str, str]) -> dict[str, bytes]:
    """Every quoted include a source reaches, transitively: generated sources (``problem.h``) by
    name, project headers under include_dir.  Each object's fingerprint covers exactly these, so
    editing the routing header rebuilds the layer and no GEMM kernel.  (CUTLASS and system headers
    are angle-bracket includes, covered by the toolchain digest.)"""
    found: dict[str, bytes] = {}
    todo = list(_QUOTED_INCLUDE.findall(text))
    while todo:
        name = todo.pop()
        if name in found:
            continue
        if name in sources:
            data = sources[name].encode()
        elif (include_dir / name).is_file():
            data = (include_dir / name).read_bytes()
        else:
            raise BuildError(f"#include \"{name}\": neither a generated source nor a file under {include_dir}")
        found[name] = data
        todo.extend(_QUOTED_INCLUDE.findall(data.decode(errors="replace")))
    return found


def find_toolchain() -> Toolchain:
    """nvcc through cuda-python's pathfinder (system toolkit or pip wheels); CUTLASS from its wheel."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
    except ImportError as e:
        raise BuildError(f"cuda-python is not installed ({e}); `pip install cuda-python`") from None
    nvcc = find_nvidia_binary_utility("nvcc")
    if not nvcc:
        raise BuildError("nvcc not found by cuda.pathfinder: install the CUDA toolkit or the nvidia-cuda-nvcc wheel")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release [\d.]+, (V[\d.]+)", out)
    if not m:
        raise BuildError(f"{nvcc} --version: unexpected output {out!r}")
    try:
        import cutlass_library
    except ImportError:
        raise BuildError("nvidia-cutlass is not installed: `pip install nvidia-cutlass` (it carries the headers)") from None
    include = Path(cutlass_library.__file__).resolve().parent / "source" / "include"
    version_h = include / "cutlass" / "version.h"
    if not version_h.exists():
        raise BuildError(f"CUTLASS headers not found at {include}")
    text = version_h.read_text()
    ver = ".".join(re.search(rf"#define CUTLASS_{k} (\d+)", text).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
    return Toolchain(nvcc=nvcc, nvcc_version=m.group(1), cutlass_include=include, cutlass_version=ver)


def output_dir(spec: ModelSpec, arch: str, root: Path) -> Path:
    return root / spec.variant / arch


def plan_build(spec: ModelSpec, arch: str, configs: list[KernelConfig], out_dir: Path, toolchain: Toolchain,
               headers_digest: str | None = None, cutlass_digest: str | None = None,
               include_dir: Path = render.INCLUDE_DIR) -> BuildPlan:
    if arch not in ARCH_GENCODE:
        raise BuildError(f"arch {arch!r}: moegen has kernels for {', '.join(ARCH_GENCODE)} only "
                         "(SM100 kernels are not written yet)")
    if not configs:
        raise BuildError("no kernel configs to build")
    wrong = [c.name for c in configs if c.arch != arch]
    if wrong:
        raise BuildError(f"configs: {wrong[0]} is not an {arch} kernel")
    try:
        check_configs(spec, configs)
    except ValueError as e:
        raise BuildError(str(e)) from None
    for gemm in ("gemm1", "gemm2"):
        if not any(c.gemm == gemm for c in configs):
            raise BuildError(f"configs: no {gemm} kernel; the layer needs at least one of each GEMM")
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise BuildError(f"configs: duplicate kernel names {sorted(n for n in names if names.count(n) > 1)}")
    headers_digest = headers_digest or _cached_tree_digest(render.TEMPLATE_DIR)
    cutlass_digest = cutlass_digest or _cached_tree_digest(toolchain.cutlass_include)
    flags = (*BASE_FLAGS, ARCH_GENCODE[arch])
    # Project headers compile from the build's own snapshot (src/include), so the objects are built from
    # exactly the bytes their fingerprints cover, even if a header is edited while nvcc runs.
    includes = ("-I.", "-Isrc/include", f"-I{toolchain.cutlass_include}")
    toolchain_key = _sha(toolchain.nvcc_version, toolchain.cutlass_version, cutlass_digest, *flags)
    env_key = _sha(toolchain_key, headers_digest)  # the library: any template or header

    spec_json = json.dumps(spec.to_dict(), sort_keys=True)
    fingerprint = _sha(env_key, spec_json, arch, *names)  # order too: it is the library's kernel table
    kernels = [dict(name=c.name, gemm=c.gemm, block_m=c.block_m, block_n=c.block_n, block_k=c.block_k,
                    stages=c.stages) for c in configs]
    build_info = dict(abi_version=ABI_VERSION, fingerprint=fingerprint, variant=spec.variant, arch=arch,
                      spec=spec.to_dict(), kernels=[k["name"] for k in kernels])
    sources = {"problem.h": render.problem_header(spec)}
    for c in configs:
        sources[f"{c.name}.cu"] = render.gemm_source(spec, c)
    sources["layer.cu"] = render.layer_source(spec, arch, configs, build_info)

    compiles, headers = [], {}
    for src, text in list(sources.items()):
        if not src.endswith(".cu"):
            continue
        stem = src[:-3]
        deps = included_files(text, include_dir, sources)
        headers.update((name, data) for name, data in deps.items() if name not in sources)
        fp = _sha(toolchain_key, text, *(f"{name}\0" for name in sorted(deps)), *(deps[n] for n in sorted(deps)))
        obj = f"{stem}-{fp[:16]}.o"
        cmd = (toolchain.nvcc, *flags, *includes, "-c", f"src/{src}", "-o", f"obj/{obj}")
        compiles.append(CompileStep(stem, src, obj, cmd, fp))
    sources.update((f"include/{name}", data.decode()) for name, data in sorted(headers.items()))
    library = f"libmoegen-{fingerprint[:16]}.so"
    link = (toolchain.nvcc, "-shared", ARCH_GENCODE[arch], "-o", library, *(f"obj/{c.obj}" for c in compiles))
    manifest = dict(schema=MANIFEST_SCHEMA, abi_version=ABI_VERSION, fingerprint=fingerprint, variant=spec.variant,
                    model=spec.name, arch=arch, spec=spec.to_dict(), kernels=kernels, library=library,
                    toolchain=dict(nvcc=toolchain.nvcc_version, cutlass=toolchain.cutlass_version,
                                   flags=list(flags)))
    return BuildPlan(out_dir=out_dir, sources=sources, compiles=tuple(compiles), link_command=link,
                     library=library, manifest=manifest, fingerprint=fingerprint)


def atomic_write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs are ordinary readable files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(out_dir: Path) -> dict | None:
    try:
        return json.loads((out_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


_PTXAS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
# ptxas advisories C751x "wgmma.mma_async instructions are serialized" (each waits for the previous:
# C7512 for lack of registers, C7513 for non-wgmma instructions writing wgmma inputs mid-pipeline),
# a silent slowdown
_WGMMA_SERIALIZED = re.compile(r"\(C751\d\) Potential Performance Loss: wgmma\.mma_async instructions are serialized")


def ptxas_resources(log: str) -> dict:
    regs = [int(x) for x in _PTXAS.findall(log)]
    spills = [int(a) + int(b) for a, b in _SPILL.findall(log)]
    return dict(max_registers=max(regs, default=0), spill_bytes=sum(spills),
                wgmma_serialized=len(_WGMMA_SERIALIZED.findall(log)))


def run_build(plan: BuildPlan, jobs: int | None = None, log: Callable[[str], None] = print) -> BuildResult:
    out = plan.out_dir
    result = BuildResult(plan)
    old = read_manifest(out)
    if (old and old.get("fingerprint") == plan.fingerprint and (out / plan.library).exists()
            and old.get("library_sha256") == file_sha256(out / plan.library)):
        result.up_to_date = True
        result.reused = [c.name for c in plan.compiles]
        result.resources = old.get("resources", {})
        log(f"{plan.manifest['variant']}/{plan.manifest['arch']}: up to date ({out})")
        return result
    for sub in ("src", "obj", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    for name, text in plan.sources.items():
        p = out / "src" / name
        if not p.exists() or p.read_text() != text:
            atomic_write(p, text)

    todo = [c for c in plan.compiles if not (out / "obj" / c.obj).exists()]
    result.reused = [c.name for c in plan.compiles if c not in todo]
    for c in plan.compiles:
        if c not in todo:
            cached_log = out / "logs" / f"{c.name}.log"
            if cached_log.exists():
                result.resources[c.name] = ptxas_resources(cached_log.read_text())
    jobs = jobs or os.cpu_count() or 1
    if todo:
        log(f"compiling {len(todo)} translation unit(s) with {min(jobs, len(todo))} parallel nvcc job(s)"
            f" ({len(result.reused)} cached)")
    start = time.monotonic()

    def compile_one(step: CompileStep):
        tmp_obj = f"obj/.{step.obj}.{os.getpid()}.{threading.get_ident()}.tmp"  # concurrent builds never share
        cmd = list(step.command)
        cmd[cmd.index(f"obj/{step.obj}")] = tmp_obj
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, check=False)
        text = proc.stdout + proc.stderr
        atomic_write(out / "logs" / f"{step.name}.log", " ".join(step.command) + "\n" + text)
        if proc.returncode != 0:
            (out / tmp_obj).unlink(missing_ok=True)
            return step, False, text, time.monotonic() - t0
        os.replace(out / tmp_obj, out / "obj" / step.obj)
        return step, True, text, time.monotonic() - t0

    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(compile_one, c) for c in todo]
        for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            step, ok, text, secs = fut.result()
            if ok:
                result.compiled.append(step.name)
                res = ptxas_resources(text)
                result.resources[step.name] = res
                spill = f", {res['spill_bytes']} B SPILLED" if res["spill_bytes"] else ""
                spill += ", WGMMA SERIALIZED (ptxas C751x)" if res["wgmma_serialized"] else ""
                log(f"[{i}/{len(todo)}] {step.name}: {secs:.0f} s, {res['max_registers']} registers{spill}")
            else:
                failures.append((step, text))
                log(f"[{i}/{len(todo)}] {step.name}: FAILED after {secs:.0f} s")
    if failures:
        step, text = failures[0]
        tail = "\n".join(text.strip().splitlines()[-40:])
        raise BuildError(f"kernel {step.name} failed to compile ({len(failures)} failure(s) in all); "
                         f"full log: {out / 'logs' / (step.name + '.log')}\n{tail}")

    tmp_lib = f".{plan.library}.{os.getpid()}.tmp"
    link = list(plan.link_command)
    link[link.index(plan.library)] = tmp_lib
    proc = subprocess.run(link, cwd=out, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        (out / tmp_lib).unlink(missing_ok=True)
        raise BuildError(f"link of {plan.library} failed:\n{proc.stdout}{proc.stderr}")
    os.replace(out / tmp_lib, out / plan.library)
    manifest = dict(plan.manifest, library_sha256=file_sha256(out / plan.library), resources=result.resources,
                    built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    atomic_write(out / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    # Older libraries are unreachable once the manifest names the new one.
    for p in out.glob("libmoegen-*.so"):
        if p.name != plan.library:
            p.unlink(missing_ok=True)
    if todo:
        log(f"built {out / plan.library} in {time.monotonic() - start:.0f} s")
    return result


def clean_objects(out_dir: Path, plan: BuildPlan) -> None:
    """Drop cached objects no longer named by the plan."""
    keep = {c.obj for c in plan.compiles}
    for p in (out_dir / "obj").glob("*.o"):
        if p.name not in keep:
            p.unlink()


def build(spec: ModelSpec, arch: str, configs: list[KernelConfig], root: Path, jobs: int | None = None,
          log: Callable[[str], None] = print) -> BuildResult:
    if arch not in ARCH_GENCODE:
        raise BuildError(f"arch {arch!r}: moegen has kernels for {', '.join(ARCH_GENCODE)} only "
                         "(SM100 kernels are not written yet)")
    toolchain = find_toolchain()
    out = output_dir(spec, arch, root)
    plan = plan_build(spec, arch, configs, out, toolchain)
    result = run_build(plan, jobs=jobs, log=log)
    if not result.up_to_date:
        clean_objects(out, plan)
    return result


__all__ = ["BuildError", "BuildPlan", "BuildResult", "CompileStep", "Toolchain", "atomic_write", "build",
           "find_toolchain", "included_files", "output_dir", "plan_build", "run_build", "tree_digest"]
