"""Build artifacts on disk: the manifest's schema, the C ABI version, content hashing and atomic writes.

Ground floor: the build writes these, the runtime reads them, and neither needs the other to do so.
A manifest is read back field by field; anything off gives an ArtifactError naming the file, the
field, the value and what was expected.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths import PACKAGE_DIR, blocking_file, read_small_file
from .spec import ModelSpec, SpecError, model_from_dict, shown

MANIFEST_SCHEMA = 2
MANIFEST_NAME = "manifest.json"
ABI_VERSION = 3  # templates/include/moegen/abi.h MOEGEN_ABI_VERSION


class ArtifactError(RuntimeError):
    """A build directory, manifest or library is missing, unreadable or inconsistent."""


def sha256_bytes(*parts: str | bytes) -> str:
    """sha256 over the parts, each followed by a NUL (so ("ab", "c") and ("a", "bc") differ)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_commit() -> str:
    """The moegen commit that measured something (tables, benchmarks): MOEGEN_COMMIT where the checkout
    has no .git (a copied tree on a GPU machine), else git's short HEAD of the checkout this module is
    in (not of some other repository an installed copy happens to sit inside), else "unknown"."""
    commit = os.environ.get("MOEGEN_COMMIT")
    if commit:
        return commit
    here = Path(__file__).resolve()

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=here.parent).stdout.strip()
    try:
        top = git("rev-parse", "--show-toplevel")
        if not top or (Path(top) / "moegen" / here.name).resolve() != here:
            return "unknown"
        return git("rev-parse", "--short", "HEAD") or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# The generator: every module whose code decides what a build produces.  Its source is hashed into
# the library's fingerprint (Inductor's codecache does the same), so an edit here is never "up to date".
GENERATOR_SOURCES = ("spec.py", "problem.py", "naming.py", "layout.py", "arch", "render.py", "build.py",
                     "artifact.py")


def tree_digest(root: Path, suffixes=(".h", ".hpp", ".cuh", ".inl", ".j2", ".py")) -> str:
    """Content hash of every source file below root (paths and bytes, sorted)."""
    parts = []
    for p in sorted(x for x in root.rglob("*") if x.is_file() and x.suffix in suffixes and "__pycache__" not in x.parts):
        parts += [str(p.relative_to(root)), p.read_bytes()]
    return sha256_bytes(*parts)


def generator_digest(package_dir: Path = PACKAGE_DIR) -> str:
    parts = []
    for name in GENERATOR_SOURCES:
        path = package_dir / name
        parts += [name, tree_digest(path) if path.is_dir() else path.read_bytes()]
    return sha256_bytes(*parts)


def output_dir(spec: Any, arch: str, root: Path) -> Path:
    """A build's directory under an output root: root/<variant>/<arch> (spec: a moegen.spec.ModelSpec)."""
    return Path(root) / spec.variant / arch


def atomic_write(path: Path, data: str | bytes, user_path: bool = False) -> None:
    """Write path through a temporary file in its directory and a rename: a reader sees the old
    contents or the new, never part of either (also when the writer is killed).  A path the user named
    (user_path: `-o`, `--json`) is written through a symbolic link (the link stays) and a directory,
    device or FIFO there is refused; moegen's own files replace whatever is at their path, so a link
    planted in an output directory never sends a write outside it."""
    path = Path(path)
    try:
        if user_path and (path.is_symlink() or path.exists()):
            target = path.resolve()
            if target.exists() and not target.is_file():
                kind = "a directory" if target.is_dir() else "not a regular file (a device, FIFO or socket)"
                raise ArtifactError(f"{path}: is {kind}, expected a regular file or a new file's path")
            path = target
    except (OSError, RuntimeError) as e:  # a name too long, a symlink loop
        raise ArtifactError(f"{shown(str(path))}: cannot write ({getattr(e, 'strerror', None) or e}); expected a "
                            "writable file path") from None
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # the writer's pid in the name: a build cleaning the shared store leaves a running writer's file
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs are ordinary readable files
        os.replace(tmp, path)
    except OSError as e:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        blocker = blocking_file(path)
        reason = f"{blocker} is not a directory" if blocker else (e.strerror or str(e))
        raise ArtifactError(f"{path}: cannot write ({reason}); expected a writable file path") from None
    except BaseException:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class Manifest:
    path: Path
    fingerprint: str
    variant: str
    arch: str
    spec: dict  # ModelSpec.to_dict()
    kernels: tuple[str, ...]  # canonical names, in the library's kernel-table order
    library: str  # file name beside the manifest
    library_sha256: str
    weight_layout: str
    activation_format: str
    data: dict  # the whole document (toolchain, objects, resources, ...)

    @property
    def out_dir(self) -> Path:
        return self.path.parent

    @property
    def library_path(self) -> Path:
        return self.out_dir / self.library


def _field(path: Path, data: dict, key: str, kind: type, what: str) -> Any:
    v = data.get(key)
    if not isinstance(v, kind):
        raise ArtifactError(f"{path}: field '{key}' = {shown(v)}: expected {what}; rebuild with `moegen build`")
    return v


def read_manifest(out_dir: Path) -> Manifest:
    """The manifest of a build directory, checked for shape (not against its library: see verify_library)."""
    path = Path(out_dir) / MANIFEST_NAME
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ArtifactError(f"{out_dir}: not a directory (expected a build directory with {MANIFEST_NAME})")
    try:
        text = read_small_file(path, 16 << 20).decode()
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no manifest; run `moegen build` first") from None
    except IsADirectoryError:
        raise ArtifactError(f"{path}: is a directory, expected the build's JSON manifest") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ArtifactError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise ArtifactError(f"{path}: nested too deeply, expected the build's JSON manifest") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: top level = {type(data).__name__}: expected a JSON object; rebuild")
    if data.get("schema") != MANIFEST_SCHEMA:
        raise ArtifactError(f"{path}: field 'schema' = {shown(data.get('schema'))}: expected {MANIFEST_SCHEMA}; rebuild "
                            "with this moegen")
    kernels = _field(path, data, "kernels", list, "a list of kernel entries")
    names = []
    for k in kernels:
        if not isinstance(k, dict) or not isinstance(k.get("name"), str):
            raise ArtifactError(f"{path}: field 'kernels' holds {shown(k)}: expected objects with a 'name'")
        names.append(k["name"])
    library = _field(path, data, "library", str, "the library's file name")
    if Path(library).name != library or not library.startswith("libmoegen-") or not library.endswith(".so"):
        raise ArtifactError(f"{path}: field 'library' = {shown(library)}: expected a libmoegen-*.so file name beside it")
    return Manifest(path=path, fingerprint=_field(path, data, "fingerprint", str, "a sha256 hex digest"),
                    variant=_field(path, data, "variant", str, "the variant name"),
                    arch=_field(path, data, "arch", str, "an arch name"),
                    spec=_field(path, data, "spec", dict, "the model spec as an object"),
                    kernels=tuple(names), library=library,
                    library_sha256=_field(path, data, "library_sha256", str, "a sha256 hex digest"),
                    weight_layout=_field(path, data, "weight_layout", str, "a weight layout name"),
                    activation_format=_field(path, data, "activation_format", str, "an activation format"),
                    data=data)


def verify_library(m: Manifest) -> None:
    """The library the manifest names exists, is a file, has the manifest's sha256, and embeds the build
    info of the manifest's fingerprint with the manifest's variant, arch and kernel table (an edited
    manifest keeps the library's sha256)."""
    lib = m.library_path
    if not lib.exists():
        raise ArtifactError(f"{lib}: library named by {m.path} is missing; rebuild")
    if not lib.is_file():
        raise ArtifactError(f"{lib}: not a file (the manifest names it as the library); rebuild")
    data = lib.read_bytes()
    if hashlib.sha256(data).hexdigest() != m.library_sha256:
        raise ArtifactError(f"{lib}: its sha256 differs from {m.path}'s (a stale or damaged library); rebuild")
    info = embedded_build_info(data, m.fingerprint)
    if info is None:
        raise ArtifactError(f"{lib}: embeds no build info of the fingerprint {m.fingerprint[:16]} that {m.path} "
                            "gives; rebuild")
    for field, value in (("variant", m.variant), ("arch", m.arch), ("kernels", list(m.kernels))):
        if info.get(field) != value:
            raise ArtifactError(f"{m.path}: field '{field}' = {shown(value)}: expected {shown(info.get(field))}, "
                                "which its library embeds; rebuild")


_BUILD_INFO_OPENING = b'{"abi_version": '  # build_info.cu's JSON, its keys sorted


def embedded_build_info(data: bytes, fingerprint: str) -> dict | None:
    """The build info (moegen.render.build_info_source) a library's bytes hold for this fingerprint."""
    decoder = json.JSONDecoder()
    start = data.find(_BUILD_INFO_OPENING)
    while start != -1:
        try:
            info, _ = decoder.raw_decode(data[start:start + (4 << 20)].decode("utf-8", "replace"))
        except ValueError:
            info = None
        if isinstance(info, dict) and info.get("fingerprint") == fingerprint:
            return info
        start = data.find(_BUILD_INFO_OPENING, start + 1)
    return None


def built_spec(m: Manifest, expected: ModelSpec | None = None) -> ModelSpec:
    """The spec the library was built for; ArtifactError if it does not read, or differs from `expected`
    (the first field that differs named)."""
    try:
        built = model_from_dict(m.spec, f"{m.path}:spec")
    except SpecError as e:
        raise ArtifactError(f"{e}; rebuild") from None
    if expected is None:
        return built
    want, have = expected.to_dict(), built.to_dict()  # a field absent from the manifest reads as its default
    if want != have:
        diff = next(k for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k))
        raise ArtifactError(f"{m.path}: built for {m.variant}, but the spec given differs at '{diff}': built "
                            f"{have.get(diff)!r}, given {want.get(diff)!r}; rebuild for this spec")
    return built
