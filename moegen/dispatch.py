"""Dispatch: which kernels run for a token count, from versioned tables keyed by GPU and problem.

A table names kernels by their canonical names and is filed under
``<dir>/<arch>/<gpu slug>/<problem key>.json`` (moegen.problem.ProblemKey): the GPU model and its SM
count, and the GEMM problem, decide the choice; no build fingerprint does, so tables ship with moegen
(``configs/dispatch``) and every build whose kernels include a table's picks can use it.  Lookup
order: a user table (``moegen tune`` writes them under ``<out>/dispatch``), a shipped table for this
GPU, a shipped table of another GPU of the arch for this problem (with a warning), and last the
documented heuristic over the library's kernels (with a warning).  A driver or CUDA version that
differs from the tuning machine's warns and still uses the table.  A partial table (a tune cut
short) hands T beyond its last bucket to the next table in that order.

Ground floor: it imports spec, problem, naming and paths only.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .naming import KernelConfig, parse_kernel_name
from .problem import ProblemKey, rows_per_expert
from .paths import CONFIG_DIR, read_small_file
from .spec import ModelSpec, shown

TABLE_SCHEMA = 2
SHIPPED_DIR = CONFIG_DIR / "dispatch"
USER_DIR_NAME = "dispatch"  # under a build's output root


class DispatchError(RuntimeError):
    pass


class NewerTableError(DispatchError):
    """A table of a later schema than this moegen reads: never replaced, since it holds newer work."""


@dataclass(frozen=True)
class GpuInfo:
    name: str
    sm_count: int
    driver: str = "unknown"
    cuda: str = "unknown"

    @property
    def slug(self) -> str:
        return gpu_slug(self.name, self.sm_count)


def gpu_slug(name: str, sm_count: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + f"-{sm_count}sm"


def table_path(root: Path, arch: str, gpu: GpuInfo, problem: ProblemKey) -> Path:
    return Path(root) / arch / gpu.slug / f"{problem.slug}.json"


def user_dir(out_root: Path) -> Path:
    return Path(out_root) / USER_DIR_NAME


class Dispatch:
    """Bucket lookup: the table's choice for the smallest bucket >= T, the largest bucket's beyond it.
    A partial table (a tune cut short: ``tuned_with.partial``) measured nothing beyond its last
    bucket: there it asks `fallback`, the next table in the lookup order, and answers None without
    one; the caller uses the heuristic then."""

    def __init__(self, table: dict, kernel_names: list[str], source: str):
        rows = sorted(table["buckets"], key=lambda b: b["tokens"])
        if not rows:
            raise DispatchError("no buckets")
        index = {n: i for i, n in enumerate(kernel_names)}
        missing = [n for b in rows for n in (b["gemm1"], b["gemm2"]) if n not in index]
        if missing:
            raise DispatchError(f"names {missing[0]}, which the library does not have (build it with "
                                "`moegen build`'s default kernels, or `moegen tune` for this library)")
        self.source = source
        self.tokens = [b["tokens"] for b in rows]
        self.picks = [(index[b["gemm1"]], index[b["gemm2"]]) for b in rows]
        self.partial = is_partial(table)
        self.fallback: Dispatch | None = None

    def choose(self, tokens: int) -> tuple[int, int] | None:
        for t, pick in zip(self.tokens, self.picks):
            if tokens <= t:
                return pick
        if not self.partial:
            return self.picks[-1]
        return self.fallback.choose(tokens) if self.fallback is not None else None


def is_partial(table: dict) -> bool:
    return bool(table.get("tuned_with", {}).get("partial", False))


def read_table(path: Path) -> dict:
    """A table file, checked for shape; DispatchError names the file and what is wrong."""
    try:
        table = json.loads(read_small_file(Path(path)))
    except (OSError, UnicodeDecodeError) as e:
        raise DispatchError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    except ValueError as e:
        raise DispatchError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise DispatchError(f"{path}: nested too deeply, expected a dispatch table") from None
    if isinstance(table, dict) and type(table.get("schema")) is int and table["schema"] > TABLE_SCHEMA:
        raise NewerTableError(f"{path}: schema {table['schema']}, written by a newer moegen (this one reads "
                              f"schema {TABLE_SCHEMA}); upgrade moegen to use it")
    if not isinstance(table, dict) or table.get("schema") != TABLE_SCHEMA:
        got = table.get("schema") if isinstance(table, dict) else type(table).__name__
        raise DispatchError(f"{path}: schema {shown(got)}, expected {TABLE_SCHEMA}; re-run `moegen tune`")
    tuned_with = table.setdefault("tuned_with", {})
    if not isinstance(tuned_with, dict):
        raise DispatchError(f"{path}: field 'tuned_with' = {shown(tuned_with)}: expected an object")
    if not isinstance(tuned_with.get("partial", False), bool):
        raise DispatchError(f"{path}: field 'tuned_with.partial' = {shown(tuned_with['partial'])}: "
                            "expected true or false")
    buckets = table.get("buckets")
    if not isinstance(buckets, list) or not buckets:
        raise DispatchError(f"{path}: field 'buckets' = {shown(buckets)}: expected a non-empty list")
    for b in buckets:
        ok = isinstance(b, dict) and type(b.get("tokens")) is int and b["tokens"] > 0  # not a bool
        for gemm in ("gemm1", "gemm2"):
            try:
                ok = ok and parse_kernel_name(b.get(gemm)).gemm == gemm
            except ValueError:
                ok = False
        if not ok:
            raise DispatchError(f"{path}: bucket {shown(b)}: expected tokens > 0 and a gemm1 and a gemm2 kernel name")
        if not _number_or_null(b.setdefault("us", None)):  # a hand-written bucket may give no time
            raise DispatchError(f"{path}: bucket {shown(b)}: field 'us' = {shown(b.get('us'))}: expected a finite "
                                "number >= 0 or null")
    tokens = sorted(b["tokens"] for b in buckets)
    twice = next((t for t, u in zip(tokens, tokens[1:]) if t == u), None)
    if twice is not None:
        raise DispatchError(f"{path}: two buckets for tokens = {twice}: expected one per token count")
    _check_filed_where_it_belongs(Path(path), table)
    rows = table.setdefault("measurements", [])  # a hand-written table may have no timings
    if not isinstance(rows, list):
        raise DispatchError(f"{path}: field 'measurements' = {shown(rows)}: expected a list of timings")
    for row in rows:
        if not _measurement_ok(row):
            raise DispatchError(f"{path}: measurement {shown(row)}: expected [tokens, gemm1, gemm2, us or null, "
                                "SM MHz or null, W or null, stage, reason]")
    return table


def _number_or_null(v) -> bool:
    # the tuner writes a failed timing as null: NaN or Infinity (which Python's json reads) is a damaged file
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0)


def _measurement_ok(row) -> bool:
    return (isinstance(row, list) and len(row) == 8 and type(row[0]) is int and row[0] > 0
            and all(isinstance(x, str) for x in (row[1], row[2], row[6], row[7]))
            and all(_number_or_null(x) for x in row[3:6]))


def _check_filed_where_it_belongs(path: Path, table: dict) -> None:
    """A table's own arch, GPU and problem are those of the place it is filed under (ARCH/GPU/PROBLEM.json):
    the runtime finds tables by that place, so one copied under another problem's name would dispatch
    kernels tuned for another shape."""
    gpu, key, arch = table.get("gpu"), table.get("problem_key"), table.get("arch")
    if not (isinstance(gpu, dict) and isinstance(gpu.get("name"), str) and type(gpu.get("sm_count")) is int
            and gpu["sm_count"] > 0):
        raise DispatchError(f"{path}: field 'gpu' = {shown(gpu)}: expected {{\"name\": ..., \"sm_count\": ...}}")
    try:
        ProblemKey.parse(key if isinstance(key, str) else "")
    except ValueError:
        raise DispatchError(f"{path}: field 'problem_key' = {shown(key)}: expected "
                            "e<experts>-l<local>-k<top_k>-h<hidden>-i<intermediate>[-fp8]") from None
    for field, value, expected in (("problem_key", key, path.stem),
                                   ("gpu", gpu_slug(gpu["name"], gpu["sm_count"]), path.parent.name),
                                   ("arch", arch, path.parent.parent.name)):
        if value != expected:
            raise DispatchError(f"{path}: field {field!r} = {shown(value)}: expected {expected!r}, where the "
                                "table is filed")


def shipped_tables(arch: str, problem: ProblemKey, root: Path = SHIPPED_DIR) -> list[Path]:
    """Every shipped table for this problem on any GPU of the arch."""
    return sorted((Path(root) / arch).glob(f"*/{problem.slug}.json"))


def table_kernels(arch: str, problem: ProblemKey, root: Path = SHIPPED_DIR,
                  check: Callable[[KernelConfig], None] | None = None) -> tuple[list[KernelConfig], bool]:
    """The kernels the shipped tables for this problem pick (the default build), sorted, unique, and
    whether any of those tables is partial (its build then also needs the heuristic's kernels).
    check: raises ValueError for a kernel the build cannot take; the error then names the table."""
    names, partial = set(), False
    for path in shipped_tables(arch, problem, root):
        picks, table_partial = table_picks(path, check)
        names |= picks
        partial = partial or table_partial
    return sorted(parse_kernel_name(n) for n in names), partial


def table_picks(path: Path, check: Callable[[KernelConfig], None] | None = None) -> tuple[set[str], bool]:
    """One table's picked kernel names and whether it is partial; DispatchError names the table."""
    table = read_table(path)
    names = set()
    for b in table["buckets"]:
        for gemm in ("gemm1", "gemm2"):
            try:
                if check is not None:
                    check(parse_kernel_name(b[gemm]))
            except ValueError as e:
                raise DispatchError(f"{path}: bucket tokens={b['tokens']} {gemm} {b[gemm]!r}: {e}") from None
            names.add(b[gemm])
    return names, is_partial(table)


def _versions_note(path: Path, table: dict, gpu: GpuInfo) -> str:
    tuned = table.get("tuned_with", {})
    diffs = [f"{k} {tuned.get(k)} (this machine {getattr(gpu, k)})" for k in ("driver", "cuda")
             if tuned.get(k) not in (None, getattr(gpu, k))]
    return f"{path}: tuned with {', '.join(diffs)}; using it anyway" if diffs else ""


def find_dispatch(arch: str, gpu: GpuInfo, problem: ProblemKey, kernel_names: list[str],
                  user_root: Path | None = None, shipped_root: Path = SHIPPED_DIR) -> tuple[Dispatch | None, list[str]]:
    """The table to dispatch by, and notes worth a warning (why a table was passed over, or which
    fallback is used).  None: no usable table; the caller uses the heuristic."""
    notes, chain = [], []
    exact = [table_path(r, arch, gpu, problem) for r in (user_root, shipped_root) if r is not None]
    others = [p for p in shipped_tables(arch, problem, shipped_root) if p not in exact]
    for i, path in enumerate([*exact, *others]):
        if not path.is_file():
            continue
        try:
            table = read_table(path)
            dispatch = Dispatch(table, kernel_names, str(path))
        except DispatchError as e:
            notes.append(str(e) if str(path) in str(e) else f"{path}: {e}")
            continue
        if i >= len(exact):
            where = (f"beyond T = {chain[0].tokens[-1]}, the last bucket of the partial table {chain[0].source}"
                     if chain else f"no dispatch table for {gpu.name} ({gpu.sm_count} SMs) and problem {problem.slug}")
            notes.append(f"{where}; using the one tuned on {table['gpu']['name']} ({table['gpu']['sm_count']} SMs), "
                         f"{path}. `moegen tune` writes one for this GPU")
        else:
            version_note = _versions_note(path, table, gpu)
            if version_note:
                notes.append(version_note)
        if chain:
            chain[-1].fallback = dispatch
        chain.append(dispatch)
        if not dispatch.partial:  # it answers every T
            return chain[0], notes
    if chain:
        notes.append(f"beyond T = {chain[-1].tokens[-1]}, the last bucket of the partial table {chain[-1].source}, "
                     "using the block_n heuristic")
        return chain[0], notes
    notes.append(f"no dispatch table for {arch} {gpu.name} ({gpu.sm_count} SMs) and problem {problem.slug}; "
                 "using the block_n heuristic (`moegen tune` writes a table)")
    return None, notes


def heuristic_choice(kernels: list[KernelConfig], spec: ModelSpec, tokens: int) -> tuple[int, int]:
    """The documented fallback: per GEMM, the smallest block_n covering the average rows per expert
    (ties: fewer weight rows per CTA, then deeper pipelines), else the largest block_n."""
    rows = rows_per_expert(spec, tokens)
    picks = []
    for gemm in ("gemm1", "gemm2"):
        cands = [(i, k) for i, k in enumerate(kernels) if k.gemm == gemm]
        if not cands:
            raise DispatchError(f"the library has no {gemm} kernel")
        covering = [(k.block_n, k.block_m, -k.stages, i) for i, k in cands if k.block_n >= rows]
        picks.append(min(covering)[3] if covering else max([(k.block_n, -k.block_m, k.stages, i)
                                                            for i, k in cands])[3])
    return picks[0], picks[1]


_warned: set[str] = set()


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)

