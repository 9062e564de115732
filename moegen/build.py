"""Build: spec + configs -> one shared library with a C ABI, plus manifest.json.

``plan_build`` is a pure function of its inputs (spec, configs, toolchain, template and header
contents, the generator's own source) and returns the whole plan: sources, compile commands,
fingerprints.  ``run_build`` executes it:

* Objects live in a store shared by every variant and kernel set under one output root
  (``<out>/.objects/<fingerprint>.o``), keyed by content: the source text, every header it reaches,
  the flags and the toolchain.  Each has a ``.sha256`` beside it and is verified before use; a
  damaged one is compiled again.  Only ``moegen clean`` prunes the store.
* A build holds an exclusive lock on its directory (``<out>/<variant>/<arch>/.lock``) from start to
  publish, so concurrent builds of one variant serialize; what killed builds left there (temporary
  files) is removed under that lock.
* The library's fingerprint covers the objects' fingerprints, the link command, the ABI version and
  the generator's source; it is linked to a temporary name with no undefined symbols allowed,
  checked to embed that fingerprint, renamed into place, and ``manifest.json`` is replaced
  atomically last, so a reader sees either the old build or the new one.
"""
from __future__ import annotations

import concurrent.futures
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

from . import render
from .arch import get_arch, serialization_note
from .artifact import (ABI_VERSION, MANIFEST_NAME, MANIFEST_SCHEMA, ArtifactError, atomic_write, file_sha256,
                       generator_digest, output_dir, read_manifest, sha256_bytes, tree_digest)
from .naming import GEMMS, KernelConfig
from .problem import gemm_shapes
from .spec import ModelSpec, model_from_dict

BASE_FLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-Xcompiler=-fPIC",
              "-Xptxas=-v", "-lineinfo")
LINK_FLAGS = ("-Xlinker=--no-undefined",)  # a missing kernel symbol fails the link, not the dlopen
OBJECT_STORE = ".objects"  # under the output root
LOCK_NAME = ".lock"
STORE_LOCK_NAME = ".store.lock"  # its own name: --objects may point at a build directory
# Held while taking the store lock, and by `clean` throughout: new builds queue behind a waiting clean
# (flock grants new shared locks while an exclusive request waits, so a stream of builds would starve it).
STORE_GATE_NAME = ".store.gate"
STAGING = ".staging"  # a build directory's next sources and logs, until the library links


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    nvcc_version: str
    cutlass_include: Path
    cutlass_version: str
    # Where the CUDA runtime's static library is, when nvcc's own profile does not say (the pip wheels'
    # layout has lib/, the profile looks in lib64/).  A search path: not part of any fingerprint.
    lib_dirs: tuple[Path, ...] = ()
    # What else decides the compiled bytes (toolchain_identity): part of every fingerprint.
    identity: str = ""


_TOOLS = ("bin/nvcc", "bin/cudafe++", "nvvm/bin/cicc", "bin/ptxas", "bin/fatbinary", "bin/nvlink")
# nvcc's dry run, less what differs between two installs of the same toolchain: where it sits, the
# caller's PATH, temporary names
_DRYRUN_NOISE = re.compile(r"^#\$ (?:PATH|LD_LIBRARY_PATH|_HERE_|_THERE_|TOP)=.*$", re.MULTILINE)


@lru_cache(maxsize=None)
def toolchain_identity(nvcc: str) -> str:
    """Everything beyond nvcc's version string that decides what it produces: its tools' bytes and the
    CUDA headers and runtime library it compiles and links against (pip ships cicc, the headers and the
    runtime as wheels versioned apart from nvcc), and its dry run of a compile, which names the host
    compiler and its version and carries NVCC_APPEND_FLAGS, NVCC_PREPEND_FLAGS and NVCC_CCBIN."""
    bin_dir = Path(nvcc).parent
    top = bin_dir.resolve().parent
    parts = [f"{tool}={file_sha256(top / tool) if (top / tool).is_file() else 'absent'}" for tool in _TOOLS]
    if (top / "include").is_dir():
        parts.append("include=" + tree_digest(top / "include", suffixes=(".h", ".hpp", ".cuh", ".inl", "")))
    parts += [f"{lib.name}={file_sha256(lib)}" for d in _runtime_lib_dirs(nvcc) for lib in sorted(d.glob("libcudart*"))
              if lib.is_file()]
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.cu"
        probe.write_text("__global__ void probe() {}\n")
        try:
            run = subprocess.run([nvcc, "--dryrun", "-arch=sm_90a", "-c", str(probe), "-o", str(Path(tmp) / "probe.o")],
                                 capture_output=True, text=True, check=False, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            raise BuildError(f"{nvcc} --dryrun failed: {e}") from None
        dryrun = _DRYRUN_NOISE.sub("", run.stdout + run.stderr)
        for path, name in ((str(bin_dir), "$BIN"), (str(top), "$TOP"), (tmp, "$TMP")):
            dryrun = dryrun.replace(path, name)
        dryrun = re.sub(r"tmpxft_\w+", "tmpxft", dryrun)
    host = re.search(r"^#\$ (\S+) .*-E -x c\+\+", dryrun, re.MULTILINE)
    if host and shutil.which(host.group(1)):
        version = subprocess.run([host.group(1), "--version"], capture_output=True, text=True, check=False, timeout=60)
        parts.append("host=" + (version.stdout.splitlines() or [""])[0])
    return sha256_bytes(*parts, dryrun)


def _runtime_lib_dirs(nvcc: str) -> tuple[Path, ...]:
    top = Path(nvcc).resolve().parent.parent
    return tuple(d for d in (top / "lib", top / "lib64") if (d / "libcudart_static.a").is_file())


@dataclass(frozen=True)
class CompileStep:
    name: str  # kernel name, "layer" or "build_info"
    source: str  # file name under src/
    command: tuple[str, ...]  # run in the build directory; the output goes to obj (the store)
    fingerprint: str

    @property
    def obj(self) -> str:
        return f"{self.fingerprint}.o"


@dataclass(frozen=True)
class BuildPlan:
    out_dir: Path
    store: Path
    sources: dict[str, str]  # src/ file name -> text (generated sources, and include/ the headers they use)
    compiles: tuple[CompileStep, ...]
    link_command: tuple[str, ...]  # objects as paths relative to out_dir
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


@lru_cache(maxsize=None)
def _cached_tree_digest(root: Path) -> str:
    return tree_digest(root)


_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def included_files(text: str, include_dir: Path, sources: dict[str, str]) -> dict[str, bytes]:
    """Every quoted include a source reaches, transitively: generated sources by name, project
    headers under include_dir.  Each object's fingerprint covers exactly these, so editing the
    routing header rebuilds the layer and no GEMM kernel.  (CUTLASS and system headers are
    angle-bracket includes, covered by the toolchain digest.)"""
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
        raise BuildError("nvcc not found by cuda.pathfinder (it reads CUDA_HOME or CUDA_PATH, not PATH): set "
                         "CUDA_HOME to a CUDA toolkit, or install the `[nvcc]` extra's wheels (with --no-deps on a "
                         "machine whose torch must stay: moegen pins torch==2.13.0)")
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"{nvcc} --version failed: {e}") from None
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
    return Toolchain(nvcc=nvcc, nvcc_version=m.group(1), cutlass_include=include, cutlass_version=ver,
                     lib_dirs=_runtime_lib_dirs(nvcc), identity=toolchain_identity(nvcc))


def check_plan_inputs(spec: ModelSpec, arch: str, configs: list[KernelConfig]) -> None:
    try:
        policy = get_arch(arch, spec.activations)
    except ValueError as e:
        raise BuildError(str(e)) from None
    if not configs:
        raise BuildError("no kernel configs to build")
    wrong = [c.name for c in configs if c.arch != arch]
    if wrong:
        raise BuildError(f"configs: {wrong[0]} is not an {arch} kernel")
    try:
        policy.check_configs(spec, configs)
    except ValueError as e:
        raise BuildError(str(e)) from None
    for gemm in GEMMS:
        if not any(c.gemm == gemm for c in configs):
            raise BuildError(f"configs: no {gemm} kernel; the layer needs at least one of each GEMM")
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise BuildError(f"configs: duplicate kernel names {sorted(n for n in names if names.count(n) > 1)}")


def plan_build(spec: ModelSpec, arch: str, configs: list[KernelConfig], out_root: Path, toolchain: Toolchain,
               cutlass_digest: str | None = None, include_dir: Path = render.INCLUDE_DIR,
               generator: str | None = None, store: Path | None = None) -> BuildPlan:
    """store: the object store (default out_root/.objects; the GPU tests share the main one)."""
    check_plan_inputs(spec, arch, configs)
    policy = get_arch(arch, spec.activations)
    out_dir = output_dir(spec, arch, out_root)
    store = Path(store).absolute() if store is not None else out_root / OBJECT_STORE
    # Both CUTLASS include roots: the library's headers and cutlass/util's (packed strides)
    cutlass_util = toolchain.cutlass_include.parent / "tools" / "util" / "include"
    cutlass_digest = cutlass_digest or sha256_bytes(_cached_tree_digest(toolchain.cutlass_include),
                                                    _cached_tree_digest(cutlass_util) if cutlass_util.is_dir() else "")
    generator = generator or generator_digest()
    flags = (*BASE_FLAGS, policy.gencode)
    # Project headers compile from the build's own snapshot (src/include), so the objects are built from
    # exactly the bytes their fingerprints cover, even if a header is edited while nvcc runs.
    includes = ("-I.", "-Isrc/include", f"-I{toolchain.cutlass_include}", f"-I{cutlass_util}")
    toolchain_key = sha256_bytes(toolchain.nvcc_version, toolchain.identity, toolchain.cutlass_version, cutlass_digest,
                                 *flags)
    kernels = [dict(name=c.name, gemm=c.gemm, block_m=c.block_m, block_n=c.block_n, block_k=c.block_k,
                    stages=c.stages) for c in configs]

    sources = {f"{c.name}.cu": render.gemm_source(spec, c) for c in configs}
    sources["layer.cu"] = render.layer_source(spec, arch, configs)

    def step(stem: str, text: str, headers: dict) -> CompileStep:
        deps = included_files(text, include_dir, sources)
        headers.update((name, data) for name, data in deps.items() if name not in sources)
        fp = sha256_bytes(toolchain_key, text, *(f"{name}\0" for name in sorted(deps)), *(deps[n] for n in sorted(deps)))
        return CompileStep(stem, f"{stem}.cu", (toolchain.nvcc, *flags, *includes, "-c", f"src/{stem}.cu"), fp)

    headers: dict[str, bytes] = {}
    compiles = [step(src[:-3], text, headers) for src, text in sources.items()]
    # The link runs in the build directory's real place, which a symlink in its path moves.  Not in the
    # fingerprint: the objects' own fingerprints are.
    rel_store = os.path.relpath(Path(store).resolve(), Path(out_dir).resolve())
    # The library's identity: everything that produced it (headers enter through the object fingerprints).
    link_flags = ("-shared", policy.gencode, *LINK_FLAGS)
    fingerprint = sha256_bytes("library", str(ABI_VERSION), generator, toolchain_key, *link_flags,
                               *(f"{c.name}={c.fingerprint}" for c in compiles), arch,
                               json.dumps(spec.to_dict(), sort_keys=True))
    build_info = dict(abi_version=ABI_VERSION, fingerprint=fingerprint, variant=spec.variant, arch=arch,
                      spec=spec.to_dict(), kernels=[c.name for c in configs])
    sources["build_info.cu"] = render.build_info_source(build_info)
    compiles.append(step("build_info", sources["build_info.cu"], headers))
    sources.update((f"include/{name}", data.decode()) for name, data in sorted(headers.items()))
    library = f"libmoegen-{fingerprint[:16]}.so"
    link = (toolchain.nvcc, *link_flags, *(f"-L{d}" for d in toolchain.lib_dirs), "-o", library,
            *(f"{rel_store}/{c.obj}" for c in compiles))
    manifest = dict(schema=MANIFEST_SCHEMA, abi_version=ABI_VERSION, fingerprint=fingerprint, variant=spec.variant,
                    model=spec.name, arch=arch, spec=spec.to_dict(), kernels=kernels, library=library,
                    weight_layout=policy.weight_layout, activation_format=policy.activation_format,
                    compute_capability=list(policy.compute_capability), generator=generator,
                    objects={c.name: c.fingerprint for c in compiles},
                    toolchain=dict(nvcc=toolchain.nvcc_version, cutlass=toolchain.cutlass_version, flags=list(flags)))
    return BuildPlan(out_dir=out_dir, store=store, sources=sources, compiles=tuple(compiles), link_command=link,
                     library=library, manifest=manifest, fingerprint=fingerprint)


# --- execution --------------------------------------------------------------------------------

def _prepare_dir(path: Path, what: str) -> None:
    """mkdir -p with a one-line BuildError naming the path for every way it can fail."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise BuildError(f"{path}: exists and is not a directory (expected the {what} directory)") from None
    except NotADirectoryError:
        raise BuildError(f"{path}: a parent is a file, not a directory (expected the {what} directory)") from None
    except OSError as e:
        raise BuildError(f"{path}: cannot create the {what} directory: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise BuildError(f"{path}: not writable (the {what} directory)")


@contextmanager
def directory_lock(path: Path, log: Callable[[str], None] = print, shared: bool = False,
                   waiting: str = "another build of {path} to finish", name: str = LOCK_NAME) -> Iterator[None]:
    """A flock on path/<name>, exclusive or shared, held until the block ends (the kernel drops it if
    the process dies, so a killed build never blocks the next).  A lock file another user created
    (mode 0644) is locked through a read-only descriptor: flock needs no write access."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    lock_path = path / name
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except PermissionError:
        fd = None
    except OSError as e:
        raise BuildError(f"{lock_path}: cannot open the build lock: {e.strerror or e}") from None
    if fd is None:
        try:
            fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise BuildError(f"{path}: not writable (its lock file {name} cannot be created), expected a "
                             "directory this user may write") from None
        except OSError as e:
            raise BuildError(f"{lock_path}: cannot open the build lock: {e.strerror or e}") from None
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise BuildError(f"{lock_path}: cannot lock: {e.strerror or e}") from None
            log(f"waiting for {waiting.format(path=path)}")
            fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the lock


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# The writer's pid, then a thread id (_tmp_name) or mkstemp's random letters (atomic_write)
_TMP_PID = re.compile(r"\.(\d+)\.(?:[A-Za-z0-9_]+\.)?tmp$")
# Older than any write in progress (nvcc writes its output at its end; atomic_write takes milliseconds):
# a writer in another pid namespace (a container sharing the store) may carry a pid not running here.
LEFTOVER_AGE_S = 600
UNNAMED_LEFTOVER_AGE_S = 86400


def remove_leftovers(directory: Path, only_dead: bool) -> list[str]:
    """Delete the temporary files (``.*.tmp``) killed runs left in directory.  With only_dead (the store,
    which builds share without an exclusive lock), only a killed run's: its writer (the pid in its name)
    is not running here and it is older than LEFTOVER_AGE_S, or it names no writer and is a day old."""
    removed = []
    if not directory.is_dir():
        return removed
    for p in directory.glob(".*.tmp"):
        if only_dead and not _killed_runs(p):
            continue
        p.unlink(missing_ok=True)
        removed.append(p.name)
    return removed


def _killed_runs(p: Path) -> bool:
    try:
        age = time.time() - p.stat().st_mtime
    except OSError:  # gone already
        return False
    m = _TMP_PID.search(p.name)
    if m is None:
        return age > UNNAMED_LEFTOVER_AGE_S
    return age > LEFTOVER_AGE_S and not _pid_alive(int(m.group(1)))


def object_ok(store: Path, step: CompileStep) -> bool:
    """The cached object exists and its bytes are the ones recorded when it was compiled."""
    obj, digest = store / step.obj, store / f"{step.obj}.sha256"
    try:
        return obj.is_file() and digest.read_text().strip() == file_sha256(obj)
    except OSError:
        return False


def _tmp_name(final: str) -> str:
    return f".{final}.{os.getpid()}.{threading.get_ident()}.tmp"


_PTXAS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
# A stack frame without spills is still local memory: an outlined call (its arguments and the
# callee's arrays on the stack), or a dynamically indexed register array
_STACK = re.compile(r"(\d+) bytes stack frame")
# ptxas advisories C751x "wgmma.mma_async instructions are serialized" (each waits for the previous:
# C7512 for lack of registers, C7513 for non-wgmma instructions writing wgmma inputs mid-pipeline),
# a silent slowdown
_WGMMA_SERIALIZED = re.compile(r"\(C751\d\) Potential Performance Loss: wgmma\.mma_async instructions are serialized")


def ptxas_resources(log: str) -> dict:
    regs = [int(x) for x in _PTXAS.findall(log)]
    spills = [int(a) + int(b) for a, b in _SPILL.findall(log)]
    return dict(max_registers=max(regs, default=0), spill_bytes=sum(spills),
                stack_bytes=max((int(x) for x in _STACK.findall(log)), default=0),
                wgmma_serialized=len(_WGMMA_SERIALIZED.findall(log)))


def _up_to_date(plan: BuildPlan) -> dict | None:
    """The current manifest's data if it is this plan's build and its library is intact."""
    try:
        m = read_manifest(plan.out_dir)
    except ArtifactError:
        return None
    lib = plan.out_dir / plan.library
    if m.fingerprint != plan.fingerprint or m.library != plan.library or not lib.is_file():
        return None
    if file_sha256(lib) != m.library_sha256:
        return None
    return m.data


def run_build(plan: BuildPlan, jobs: int | None = None, log: Callable[[str], None] = print) -> BuildResult:
    out, store = plan.out_dir, plan.store
    # an object store of its own (--objects) first: a bad one leaves no empty output or build directory
    dirs = [(out.parent.parent, "output"), (store, "object store")]
    for path, what in dirs if store.is_relative_to(out.parent.parent) else dirs[::-1]:
        _prepare_dir(path, what)
    _prepare_dir(out, "build")
    # The build directory's lock serializes builds of one variant; the store's, shared by every build
    # and taken exclusively by `clean`, keeps clean from pruning objects a running build has not linked yet.
    with ExitStack() as held:
        with directory_lock(store, log, shared=True, waiting="`moegen clean` of {path} to finish", name=STORE_GATE_NAME):
            held.enter_context(directory_lock(store, log, shared=True, waiting="`moegen clean` of {path} to finish",
                                              name=STORE_LOCK_NAME))
        held.enter_context(directory_lock(out, log))
        return _run_locked(plan, jobs, log)


def _run_locked(plan: BuildPlan, jobs: int | None, log: Callable[[str], None]) -> BuildResult:
    out, store = plan.out_dir, plan.store
    result = BuildResult(plan)
    remove_leftovers(out, only_dead=False)  # we hold the lock: nobody else writes here
    remove_leftovers(store, only_dead=True)
    current = _up_to_date(plan)
    if current is not None:
        result.up_to_date = True
        result.reused = [c.name for c in plan.compiles]
        result.resources = current.get("resources", {})
        log(f"{plan.manifest['variant']}/{plan.manifest['arch']}: up to date ({out})")
        return result
    # This build's sources and logs go to a staging directory, compiled there, and replace src/ and
    # logs/ only once the library links: a failed or killed rebuild leaves the built one's intact.
    stage = _fresh_staging(out)
    for name, text in plan.sources.items():
        atomic_write(stage / "src" / name, text)

    todo = [c for c in plan.compiles if not object_ok(store, c)]
    result.reused = [c.name for c in plan.compiles if c not in todo]
    for c in plan.compiles:
        if c not in todo:
            cached_log = store / f"{c.obj}.log"
            if cached_log.is_file():
                text = cached_log.read_text(errors="replace")
                result.resources[c.name] = ptxas_resources(text)
                _write_log(stage, c, text)  # logs/ describes this build's objects, cached or not
    try:
        jobs = jobs or os.cpu_count() or 1
        if todo:
            log(f"compiling {len(todo)} translation unit(s) with {min(jobs, len(todo))} parallel nvcc job(s)"
                f" ({len(result.reused)} cached)")
        start = time.monotonic()
        failures = []
        shapes = gemm_shapes(model_from_dict(plan.manifest["spec"]))
        nvcc = _Compiles()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
        try:
            futures = [pool.submit(_compile_one, plan, c, nvcc) for c in todo]
            for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
                step, ok, text, secs = fut.result()
                if ok:
                    result.compiled.append(step.name)
                    res = ptxas_resources(text)
                    result.resources[step.name] = res
                    note = f", {res['spill_bytes']} B SPILLED" if res["spill_bytes"] else ""
                    note += f", {res['stack_bytes']} B STACK FRAME (local memory)" if res["stack_bytes"] else ""
                    note += f", WGMMA SERIALIZED (ptxas C751x: {serialization_note(step.name, shapes)})" \
                        if res["wgmma_serialized"] else ""
                    log(f"[{i}/{len(todo)}] {step.name}: {secs:.0f} s, {res['max_registers']} registers{note}")
                else:
                    failures.append((step, text))
                    log(f"[{i}/{len(todo)}] {step.name}: FAILED after {secs:.0f} s")
        except BaseException:  # Ctrl-C, SIGTERM: start no more compiles and stop the running ones
            nvcc.stop()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if failures:
            step, text = failures[0]
            raise BuildError(f"kernel {step.name} failed to compile ({len(failures)} failure(s) in all): "
                             f"{first_error(text)}; full log: {stage / 'logs' / (step.name + '.log')}")
        _link(plan)
        manifest = dict(plan.manifest, library_sha256=file_sha256(out / plan.library), resources=result.resources)
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        # Only renames between the old build and the new (an interruption leaves at most the sources
        # and logs of the new library beside the old manifest, for milliseconds, not a hash's time).
        previous_library = _built_library(out)
        for sub in ("src", "logs"):
            if os.path.lexists(out / sub):
                os.replace(out / sub, stage / f"previous-{sub}")
            os.replace(stage / sub, out / sub)
        atomic_write(out / MANIFEST_NAME, text)
        shutil.rmtree(stage, ignore_errors=True)
        # nvcc records the absolute directory of each source in the objects' line info (-lineinfo):
        # .staging/src keeps leading to the sources, for compute-sanitizer's and ncu's source views.
        # The build is published already, so a file system without links costs only that.
        try:
            stage.mkdir(exist_ok=True)
            (stage / "src").symlink_to(Path("..") / "src")
        except OSError:
            pass
        # Older libraries are unreachable once the manifest names the new one, but for the one it named
        # before: a load that read the previous manifest may still be opening that one.
        for p in out.glob("libmoegen-*.so"):
            if p.name not in (plan.library, previous_library):
                p.unlink(missing_ok=True)
        if todo:
            log(f"built {out / plan.library} in {time.monotonic() - start:.0f} s")
        return result
    except (OSError, ArtifactError) as e:  # a disk full, a directory gone: one line, as every build error
        raise BuildError(f"{getattr(e, 'filename', None) or out}: {getattr(e, 'strerror', None) or e}") from None


def _built_library(out: Path) -> str | None:
    """The library the build directory's manifest names, if it reads."""
    try:
        return read_manifest(out).library
    except ArtifactError:
        return None


def _fresh_staging(out: Path) -> Path:
    """out/.staging, empty, a real directory (whatever a killed run or anyone else left there: a
    symlink is removed, never followed)."""
    stage = out / STAGING
    try:
        if stage.is_symlink() or (stage.exists() and not stage.is_dir()):
            stage.unlink()
        elif stage.exists():
            shutil.rmtree(stage)
        for sub in ("src", "logs"):
            (stage / sub).mkdir(parents=True)
    except OSError as e:
        raise BuildError(f"{stage}: cannot prepare the staging directory ({e.strerror or e}); expected to own "
                         f"{out}") from None
    return stage


def _write_log(out: Path, step: CompileStep, text: str) -> None:
    path, content = out / "logs" / f"{step.name}.log", " ".join(step.command) + "\n" + text
    if not path.is_file() or path.read_text(errors="replace") != content:
        atomic_write(path, content)


def first_error(log: str) -> str:
    """The line of a compiler's or linker's output that says what went wrong: the first naming an
    error, else the last (the whole output stays in the log file)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return next((line for line in lines if re.search(r"\berror\b", line, re.I)), lines[-1] if lines else "no output")


class _Compiles:
    """A build's running nvcc processes: once stopped, it starts none and kills those running, so an
    interrupted build ends at once instead of compiling the rest of its queue."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._stopped = False

    def run(self, command: list[str], cwd: Path, scratch: Path) -> tuple[int, str]:
        with self._lock:
            if self._stopped:
                return -1, "not started: the build was interrupted"
            # A process group of its own: nvcc's children (cicc, ptxas) hold its output pipe, and stop()
            # must end them all.
            proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True, env=_scratch_env(scratch))
            self._running.add(proc)
        try:
            output, _ = proc.communicate()
            return proc.returncode, output
        finally:
            with self._lock:
                self._running.discard(proc)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._running:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _scratch_env(scratch: Path) -> dict[str, str]:
    """The environment for a compile or link whose temporary files go to `scratch`, inside the
    staging directory: nvcc writes its intermediates (tens of MB a unit) under TMPDIR, and a killed
    nvcc leaves them behind, so they must stay where the next build's staging clears them."""
    scratch.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(scratch), "TMP": str(scratch), "TEMP": str(scratch)}


def _compile_one(plan: BuildPlan, step: CompileStep, nvcc: _Compiles):
    stage, store = plan.out_dir / STAGING, plan.store
    tmp = (store / _tmp_name(step.obj)).absolute()  # nvcc runs in the staging directory
    scratch = stage / "tmp" / step.obj
    t0 = time.monotonic()
    try:
        returncode, text = nvcc.run([*step.command, "-o", str(tmp)], cwd=stage, scratch=scratch)
        ok = returncode == 0 and tmp.is_file() and tmp.stat().st_size > 0
    except OSError as e:
        text, ok = f"{step.command[0]}: {e}", False
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _write_log(stage, step, text)
    if not ok:
        tmp.unlink(missing_ok=True)
        return step, False, text, time.monotonic() - t0
    digest = file_sha256(tmp)
    atomic_write(store / f"{step.obj}.log", text)
    _fsync(tmp)  # on disk before its name says it is there: a power loss leaves no empty object
    os.replace(tmp, store / step.obj)
    atomic_write(store / f"{step.obj}.sha256", digest + "\n")
    return step, True, text, time.monotonic() - t0


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link(plan: BuildPlan) -> None:
    out = plan.out_dir
    tmp_lib = _tmp_name(plan.library)
    link = list(plan.link_command)
    link[link.index(plan.library)] = tmp_lib
    try:
        try:
            proc = subprocess.run(link, cwd=out, capture_output=True, text=True, check=False,
                                  env=_scratch_env(out / STAGING / "tmp" / "link"))
        finally:
            shutil.rmtree(out / STAGING / "tmp" / "link", ignore_errors=True)
        if proc.returncode != 0:
            log_path = out / STAGING / "logs" / "link.log"
            atomic_write(log_path, " ".join(link) + "\n" + proc.stdout + proc.stderr)
            raise BuildError(f"link of {plan.library} failed: {first_error(proc.stdout + proc.stderr)}; "
                             f"full log: {log_path}")
        if plan.fingerprint.encode() not in (out / tmp_lib).read_bytes():
            raise BuildError(f"link of {plan.library}: the library does not embed its fingerprint "
                             f"{plan.fingerprint[:16]} (a cached object is not what its name says; "
                             f"`moegen clean` and rebuild)")
        _fsync(out / tmp_lib)  # its bytes, then its name, on disk before the manifest names it
        os.replace(out / tmp_lib, out / plan.library)
        _fsync(out)
    finally:
        (out / tmp_lib).unlink(missing_ok=True)


def build(spec: ModelSpec, arch: str, configs: list[KernelConfig], root: Path, jobs: int | None = None,
          log: Callable[[str], None] = print, toolchain: Toolchain | None = None,
          store: Path | None = None) -> BuildResult:
    check_plan_inputs(spec, arch, configs)  # a bad request fails before the toolchain is looked for
    if jobs is not None and jobs < 1:
        raise BuildError(f"--jobs = {jobs}: expected a positive number of parallel nvcc processes")
    toolchain = toolchain or find_toolchain()
    plan = plan_build(spec, arch, configs, Path(root), toolchain, store=store)
    return run_build(plan, jobs=jobs, log=log)


_STORE_FILE = re.compile(r"[0-9a-f]{64}\.o(\.log|\.sha256)?")  # an object, its ptxas log, its digest


def _manifests_below(root: Path) -> Iterator[Path]:
    """Every manifest under root, through symbolic links too (a build directory may be one), each
    real directory once."""
    seen = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        if MANIFEST_NAME in filenames:
            yield Path(dirpath) / MANIFEST_NAME


def clean(root: Path, log: Callable[[str], None] = print) -> int:
    """Prune the object store under root: objects no manifest anywhere below root names, and
    leftovers of killed runs.  Only the store's own files go; builds wait while it runs.  Returns the
    number of files removed."""
    root = Path(root)
    if not root.is_dir():
        raise BuildError(f"{root}: {'not a directory' if root.exists() else 'does not exist'} "
                         f"(expected an output root holding {OBJECT_STORE}/)")
    store = root / OBJECT_STORE
    if not store.is_dir():
        raise BuildError(f"{store}: no object store (expected the output root of `moegen build`, e.g. generated)")
    if not os.access(store, os.W_OK | os.X_OK):
        raise BuildError(f"{store}: not writable, expected an object store this user may prune")
    with directory_lock(store, log, waiting="another `moegen clean` of {path} (or a starting build)",
                        name=STORE_GATE_NAME), \
            directory_lock(store, log, waiting="running builds using {path} to finish", name=STORE_LOCK_NAME):
        keep, skipped = set(), []
        for manifest in _manifests_below(root):
            try:
                objects = read_manifest(manifest.parent).data.get("objects", {})
            except ArtifactError:
                skipped.append(str(manifest))
                continue
            if not isinstance(objects, dict):
                skipped.append(str(manifest))
                continue
            keep.update(f"{fp}.o" for fp in objects.values() if isinstance(fp, str))
        for manifest in skipped:
            log(f"{manifest}: unreadable, its objects are not kept (rebuild it)")
        removed = remove_leftovers(store, only_dead=False)  # under the exclusive lock: no build is writing
        for p in store.iterdir():
            match = _STORE_FILE.fullmatch(p.name)
            if match and p.is_file() and p.name[:66] not in keep:
                p.unlink(missing_ok=True)
                removed.append(p.name)
    log(f"{store}: removed {len(removed)} file(s), kept {len(keep)} object(s)")
    return len(removed)


__all__ = ["BuildError", "BuildPlan", "BuildResult", "CompileStep", "Toolchain", "build", "clean",
           "find_toolchain", "generator_digest", "included_files", "output_dir", "plan_build", "run_build",
           "tree_digest"]
