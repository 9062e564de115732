"""Per-GPU autotuning: time the built kernels per token-count bucket, write a dispatch table.

The profiler is injected (a callable ``(tokens, gemm1_index, gemm2_index) -> microseconds`` that
raises on failure; it may return a profiler.Timing, which also carries the SM clock and power), so
the search, the compaction, the bucket logic and the table format are testable without a GPU.  A
config that fails to launch or to verify scores infinity with its reason; every timing of the tune
that chose a bucket's pair is kept in the table next to the GPU and problem it was measured on (a
bucket tuned again replaces its timings).
"""
from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from .artifact import atomic_write, source_commit
from .dispatch import (TABLE_SCHEMA, DispatchError, GpuInfo, NewerTableError, heuristic_choice, is_partial, read_table,
                       table_path)
from .naming import KernelConfig, parse_kernel_name
from .problem import ProblemKey, rows_per_expert
from .sass import local_memory_findings
from .spec import ModelSpec

BUCKETS = tuple(2**i for i in range(15))  # 1, 2, 4, ..., 16384 tokens

Profiler = Callable[[int, int, int], float]


class TuneError(RuntimeError):
    pass


@dataclass(frozen=True)
class Measurement:
    tokens: int
    gemm1: str
    gemm2: str
    us: float  # math.inf when the config failed
    reason: str = ""
    sm_mhz: float | None = None  # median SM clock over the timed replays
    power_w: float | None = None  # median board power over them
    stage: str = ""  # "gemm1" / "gemm2": that GEMM's coordinate stage; "confirm": the pair round


# Pruning for one bucket: each rule one line, with its reason. The search never times these.
PRUNE_RULES: list[tuple[str, Callable[[KernelConfig, float], bool]]] = [
    ("block_n over 4x the average rows per expert: the tile would be mostly zero padding",
     lambda c, rows: c.block_n > 4 * max(8.0, rows)),
    ("block_n under 1/16 of the rows per expert: the same weights would stream 16+ times per expert",
     lambda c, rows: 16 * c.block_n < rows),
]


def pruned(c: KernelConfig, rows: float) -> str | None:
    return next((reason for reason, hit in PRUNE_RULES if hit(c, rows)), None)


# Confirmation: the best few of each GEMM's coordinate stage, every pairing timed again this many
# times; the pair with the lowest median wins.  One five-replay median did not separate the prefill
# candidates on the H200 (its T = 4096 pick benched 5 % above its tuner time).
CONFIRM_TOP = 3
CONFIRM_ROUNDS = 2


def _timed(profiler: Profiler, tokens: int, g1: int, g2: int, names: list[str], stage: str) -> Measurement:
    mhz = watts = None
    try:
        result = profiler(tokens, g1, g2)
        us = float(result)
        power = getattr(result, "power", None)
        if power is not None:
            mhz, watts = power.sm_mhz_median, power.power_w_median
        reason = "" if math.isfinite(us) and us > 0 else f"profiler returned {us!r} µs, expected a positive time"
    except Exception as e:  # noqa: BLE001 - any failure scores infinity with its reason
        us, reason = math.inf, " ".join(f"{type(e).__name__}: {e}".split())
        # ...unless it broke the CUDA context (an illegal address is sticky): every later candidate
        # would then fail too and score infinity with a reason that is not its own.
        context_alive = getattr(profiler, "context_alive", None)
        if context_alive is not None and not context_alive():
            raise TuneError(f"T = {tokens}, {names[g1]} + {names[g2]}: {reason}; the CUDA context is lost, so the "
                            "tune stops here (the buckets finished so far are saved; rerun with --kernels "
                            "leaving this pair out, and report it)") from None
    return Measurement(tokens, names[g1], names[g2], math.inf if reason else us, reason, mhz, watts, stage)


def local_memory_reasons(manifest_data: dict) -> dict[str, str]:
    """The kernels whose build left them local memory, each with what ptxas reported: `moegen sass`
    fails a library holding one, so the tuner must not pick it, however fast it times."""
    found = {kernel: local_memory_findings(kernel, res) for kernel, res in manifest_data.get("resources", {}).items()}
    return {kernel: "; ".join(lines) for kernel, lines in found.items() if lines}


def pair_score(times: list[float]) -> float:
    """How search ranks a pair of kernels: the median of its timings; infinity if any failed."""
    return statistics.median(times) if all(map(math.isfinite, times)) else math.inf


# GEMM2 kernels tried as GEMM1's partner before a bucket gives up: every GEMM1 failing beside one
# GEMM2 says more about that GEMM2 than about the GEMM1s.
PARTNER_TRIES = 3


def _gemm2_partners(kernels: list[KernelConfig], spec: ModelSpec, tokens: int, rows: float) -> list[int]:
    """GEMM2 kernels in the order the GEMM1 stage pairs with them: the heuristic's, then the unpruned."""
    first = heuristic_choice(kernels, spec, tokens)[1]
    rest = [i for i, k in enumerate(kernels) if k.gemm == "gemm2" and i != first]
    return [first] + sorted(rest, key=lambda i: (pruned(kernels[i], rows) is not None, i))


def search(kernels: list[KernelConfig], spec: ModelSpec, profiler: Profiler, buckets=BUCKETS,
           log: Callable[[str], None] = print, on_bucket: Callable | None = None,
           rejected: dict[str, str] | None = None
           ) -> tuple[dict[int, tuple[int, int, float]], list[Measurement]]:
    """Per bucket: coordinate search (best GEMM1 beside the heuristic's GEMM2, or the next
    GEMM2 that runs, then best GEMM2 with it),
    then a confirmation round over the best CONFIRM_TOP of each, every pairing timed CONFIRM_ROUNDS
    more times, the lowest median pair winning (a pair failing any timing is out).  A kernel in
    `rejected` (name: reason) is never timed: it scores infinity with its reason.

    The two GEMMs are separate launches sharing only the schedule, so their choices barely interact;
    this costs n1 + n2 + CONFIRM_ROUNDS * CONFIRM_TOP^2 timings per bucket instead of n1 * n2.
    """
    names = [k.name for k in kernels]
    rejected = rejected or {}
    choices, measurements = {}, []
    buckets = sorted(set(buckets))  # a tune cut short keeps the small buckets, which decode serves
    for bi, tokens in enumerate(buckets):
        rows = rows_per_expert(spec, tokens)
        best, ranked = {}, {}

        def stage(gemm: str, partner: int | None) -> list[tuple[float, int]]:
            cands = [i for i, k in enumerate(kernels) if k.gemm == gemm]
            results = []
            for i in [i for i in cands if pruned(kernels[i], rows) is None] or cands:
                g1, g2 = (i, partner) if gemm == "gemm1" else (best["gemm1"][0], i)
                if names[i] in rejected:
                    m = Measurement(tokens, names[g1], names[g2], math.inf, rejected[names[i]], stage=gemm)
                else:
                    m = _timed(profiler, tokens, g1, g2, names, gemm)
                measurements.append(m)
                results.append((m.us, i))
            return results

        for gemm in ("gemm1", "gemm2"):
            if gemm == "gemm1":  # GEMM1 is timed beside one GEMM2: the heuristic's, else the next that runs
                order = _gemm2_partners(kernels, spec, tokens, rows)
                partners = [i for i in order if names[i] not in rejected]
                if not partners:
                    raise TuneError(f"T={tokens}: every gemm2 candidate is rejected; first reason: "
                                    f"{rejected[names[order[0]]]}")
                for partner in partners[:PARTNER_TRIES]:
                    results = stage(gemm, partner)
                    if any(math.isfinite(us) for us, _ in results):
                        break
            else:
                results = stage(gemm, None)
            us, i = min(results)
            if not math.isfinite(us):
                raise TuneError(f"T={tokens}: every {gemm} candidate failed; first reason: "
                                f"{next(m.reason for m in measurements if m.tokens == tokens and m.stage == gemm)}")
            best[gemm] = (i, us)
            ranked[gemm] = [i for us, i in sorted(results) if math.isfinite(us)][:CONFIRM_TOP]
        times = {(best["gemm1"][0], best["gemm2"][0]): [best["gemm2"][1]]}
        for _ in range(CONFIRM_ROUNDS):
            for g1 in ranked["gemm1"]:
                for g2 in ranked["gemm2"]:
                    m = _timed(profiler, tokens, g1, g2, names, "confirm")
                    measurements.append(m)
                    times.setdefault((g1, g2), []).append(m.us)
        us, (g1, g2) = min((pair_score(ts), pair) for pair, ts in times.items())
        if not math.isfinite(us):
            raise TuneError(f"T={tokens}: every confirmed pair failed")
        choices[tokens] = (g1, g2, us)
        log(f"[{bi + 1}/{len(buckets)}] T={tokens}: {kernels[g1].name} + {kernels[g2].name}: {us:.1f} us")
        if on_bucket is not None:
            on_bucket(choices, measurements)
    return choices, measurements


def compact(kernels: list[KernelConfig], choices: dict[int, tuple[int, int, float]],
            measurements: list[Measurement], tolerance: float = 0.01) -> dict[int, tuple[int, int, float]]:
    """Fewer kernels for (almost) the same speed: per GEMM the smallest set (greedy cover) holding,
    for every bucket, a kernel within `tolerance` of that bucket's best in the GEMM's coordinate
    stage (where only that GEMM's kernel varied).  The default build compiles the shipped tables'
    picks, so this bounds its build time.  A bucket whose tuned kernel is in the set keeps it.  The
    stages' tolerances can add up: a changed pair timed as a pair (the confirmation round) more than
    `tolerance` above the tuned pair goes back to the tuned pair (H200, Qwen3-30B-A3B T = 4096: a pair
    2.6 % slower in the confirmation round, 3.3 % in the bench).  The guard scores a pair as search
    does, by the median of its timings, not their minimum: a pair once timed lucky stays out (H100,
    DeepSeek-V4-Flash T = 1024: timed 1485, 1517 and 1608 µs against the tuned pair's 1501, 7 % slower in
    the bench), and one failed timing puts it out.  Returns choices in search's form; a changed pair's
    `us` is that median, NaN when it was never timed as a pair."""
    index = {k.name: i for i, k in enumerate(kernels)}
    picks = {}
    for slot, gemm in enumerate(("gemm1", "gemm2")):
        stage: dict[int, dict[int, float]] = {t: {} for t in choices}
        for m in measurements:
            if m.stage == gemm and m.tokens in stage and math.isfinite(m.us):
                k = index[(m.gemm1, m.gemm2)[slot]]
                stage[m.tokens][k] = min(stage[m.tokens].get(k, math.inf), m.us)
        for t, pair in choices.items():  # a bucket without stage data keeps its pick
            stage[t] = stage[t] or {pair[slot]: pair[2]}
        admissible = {t: {k for k, us in times.items() if us <= (1 + tolerance) * min(times.values())}
                      | {choices[t][slot]} for t, times in stage.items()}
        chosen: set[int] = set()
        uncovered = set(admissible)
        while uncovered:  # greedy set cover; ties: the kernel the search picked most often, then the lower index
            counts: dict[int, int] = {}
            for t in uncovered:
                for k in admissible[t]:
                    counts[k] = counts.get(k, 0) + 1
            k = max(counts, key=lambda k: (counts[k], sum(1 for c in choices.values() if c[slot] == k), -k))
            chosen.add(k)
            uncovered = {t for t in uncovered if k not in admissible[t]}
        picks[slot] = {t: choices[t][slot] if choices[t][slot] in chosen else
                       min(chosen & admissible[t], key=lambda k: stage[t].get(k, math.inf)) for t in choices}
    out = {}
    for t, (g1, g2, us) in choices.items():
        n1, n2 = picks[0][t], picks[1][t]
        if (n1, n2) != (g1, g2):
            pair = [m.us for m in measurements if m.tokens == t and (index[m.gemm1], index[m.gemm2]) == (n1, n2)]
            us = pair_score(pair) if pair else math.nan
            if us > (1 + tolerance) * choices[t][2]:  # NaN compares False: an untimed pair stays
                n1, n2, us = choices[t]
        out[t] = (n1, n2, us)
    return out


def make_table(spec: ModelSpec, arch: str, gpu: GpuInfo, kernels: list[KernelConfig],
               choices: dict[int, tuple[int, int, float]], measurements: list[Measurement],
               tuned_with: dict | None = None) -> dict:
    problem = ProblemKey.of(spec)
    return dict(
        schema=TABLE_SCHEMA, arch=arch, gpu=dict(name=gpu.name, sm_count=gpu.sm_count), problem=asdict(problem),
        problem_key=problem.slug,
        tuned_with=dict(driver=gpu.driver, cuda=gpu.cuda, model=spec.variant, kernels=len(kernels),
                        created=time.strftime("%Y-%m-%d"), commit=source_commit(), **(tuned_with or {})),
        buckets=[dict(tokens=t, gemm1=kernels[g1].name, gemm2=kernels[g2].name,
                      us=None if math.isnan(us) else round(us, 2))
                 for t, (g1, g2, us) in sorted(choices.items())],
        # every timing: [tokens, gemm1, gemm2, us or null, SM MHz, W, stage, reason]
        measurements=[[m.tokens, m.gemm1, m.gemm2, None if math.isinf(m.us) else round(m.us, 2),
                       None if m.sm_mhz is None else round(m.sm_mhz), None if m.power_w is None else round(m.power_w),
                       m.stage, m.reason] for m in measurements])


def compact_table(table: dict, tolerance: float) -> dict:
    """A table's compaction from the timings it keeps (see compact): the same search, fewer kernels."""
    names = sorted({n for row in table["measurements"] for n in row[1:3]} |
                   {b[g] for b in table["buckets"] for g in ("gemm1", "gemm2")})
    index = {n: i for i, n in enumerate(names)}
    measurements = [Measurement(t, g1, g2, math.inf if us is None else us, reason, mhz, watts, stage)
                    for t, g1, g2, us, mhz, watts, stage, reason in table["measurements"]]
    choices = {b["tokens"]: (index[b["gemm1"]], index[b["gemm2"]], math.nan if b["us"] is None else b["us"])
               for b in table["buckets"]}
    kept = compact([parse_kernel_name(n) for n in names], choices, measurements, tolerance)
    buckets = [dict(tokens=t, gemm1=names[g1], gemm2=names[g2], us=None if math.isnan(us) else round(us, 2))
               for t, (g1, g2, us) in sorted(kept.items())]
    return dict(table, buckets=buckets, tuned_with=dict(table.get("tuned_with", {}), tolerance=tolerance))


def searched_pairs(table: dict) -> dict[int, tuple[str, str, float]]:
    """Each bucket's pair as search picked it, derived again from the timings the table keeps: the
    gemm2 stage's best pair and the confirmation round, lowest median.  A bucket without those
    timings keeps the table's pair."""
    pairs = {b["tokens"]: (b["gemm1"], b["gemm2"], math.nan if b["us"] is None else b["us"]) for b in table["buckets"]}
    for tokens in pairs:
        here = [m for m in table["measurements"] if m[0] == tokens]
        stage2 = [m for m in here if m[6] == "gemm2" and m[3] is not None]
        if not stage2:
            continue
        best = min(stage2, key=lambda m: m[3])
        times = {(best[1], best[2]): [best[3]]}
        for m in here:
            if m[6] == "confirm":
                times.setdefault((m[1], m[2]), []).append(math.inf if m[3] is None else m[3])
        us, (g1, g2) = min((pair_score(ts), pair) for pair, ts in times.items())
        if math.isfinite(us):  # a pair failing any timing is out, as in search
            pairs[tokens] = (g1, g2, us)
    return pairs


def merge_tables(older: dict, newer: dict) -> dict:
    """One raw table (tolerance 0) of two tunes of one GPU and problem over different buckets, as one
    tune over all of them would have written it: a bucket both timed keeps the newer timings; every
    bucket's pair is searched_pairs'.  Partial when the tune that reached the largest bucket was."""
    retuned = {b["tokens"] for b in newer["buckets"]}
    measurements = [m for m in older["measurements"] if m[0] not in retuned] + newer["measurements"]
    buckets = {b["tokens"]: b for b in older["buckets"] if b["tokens"] not in retuned}
    buckets.update((b["tokens"], b) for b in newer["buckets"])
    merged = dict(newer, measurements=measurements, buckets=[buckets[t] for t in sorted(buckets)])
    pairs = searched_pairs(merged)
    merged["buckets"] = [dict(tokens=t, gemm1=g1, gemm2=g2, us=None if math.isnan(us) else round(us, 2))
                         for t, (g1, g2, us) in sorted(pairs.items())]
    last = newer if max(retuned) >= max(b["tokens"] for b in older["buckets"]) else older
    # Every tune that went into either table: a table merged before lists its tunes in `commits`.
    commits = sorted({c for t in (older, newer)
                      for c in t.get("tuned_with", {}).get("commits", [t.get("tuned_with", {}).get("commit", "unknown")])})
    merged["tuned_with"] = dict(newer.get("tuned_with", {}), tolerance=0.0, partial=is_partial(last), commits=commits)
    return merged


def merge_into(previous: dict, raw: dict, tolerance: float) -> dict:
    """A tune of some buckets (raw, uncompacted) merged into the table already there and compacted,
    where the buckets it did not time keep their pairs: compaction alone would re-pick them among
    their timings (within the tolerance), swapping kernels nobody retuned or benched."""
    table = compact_table(merge_tables(previous, raw), tolerance)
    retuned = {b["tokens"] for b in raw["buckets"]}
    kept = {b["tokens"]: b for b in previous["buckets"] if b["tokens"] not in retuned}
    return dict(table, buckets=[kept.get(b["tokens"], b) for b in table["buckets"]])


def resumable_table(path: Path, kernel_names: list[str], contribution: bool = False) -> tuple[dict | None, str]:
    """The table a tune of the same GPU and problem adds its buckets to, or None and why not.  A user
    table serves the library being tuned: its picks must all be that library's kernels, and its timings
    of other kernels are dropped, so the merge and the compaction pick only kernels it has.  A
    contribution (`--table-root`, e.g. configs/dispatch) is kept whole: the default build compiles
    whatever it picks, so its other buckets keep their kernels."""
    if not path.is_file():
        return None, ""
    try:
        table = read_table(path)
    except NewerTableError as e:
        raise TuneError(f"{e}; not replacing it") from None
    except DispatchError as e:
        if contribution:  # a shipped table is the project's work: fix or move it, never overwrite it
            raise TuneError(f"{e}; not replacing a table under --table-root: fix or move it first") from None
        return None, f"replacing it: {e}"
    if contribution:
        return table, f"adding the tuned buckets to {path} (its other buckets keep their picks)"
    missing = sorted({b[g] for b in table["buckets"] for g in ("gemm1", "gemm2")} - set(kernel_names))
    if missing:
        return None, f"replacing {path}: it picks {missing[0]}, which this library does not have"
    names = set(kernel_names)
    kept = [m for m in table["measurements"] if m[1] in names and m[2] in names]
    return dict(table, measurements=kept), f"adding the tuned buckets to {path}"


def save_table(root: Path, table: dict, user_path: bool = False) -> Path:
    """user_path: the root is one the user named (--table-root), whose tables may be links to keep."""
    gpu = GpuInfo(table["gpu"]["name"], table["gpu"]["sm_count"])
    path = table_path(root, table["arch"], gpu, ProblemKey.parse(table["problem_key"]))
    atomic_write(path, json.dumps(table, indent=1) + "\n", user_path=user_path)
    return path


class LibraryIndices:
    """A profiler of the whole library, called with a search's indices into its candidates."""

    def __init__(self, profiler: Profiler, library_index: list[int]):
        self.profiler, self.library_index = profiler, library_index

    def __call__(self, tokens: int, gemm1: int, gemm2: int):
        return self.profiler(tokens, self.library_index[gemm1], self.library_index[gemm2])

    def context_alive(self) -> bool:
        alive = getattr(self.profiler, "context_alive", None)
        return True if alive is None else alive()


def tune_model(spec: ModelSpec, arch: str, out_root: Path, buckets=BUCKETS, kernels: list[KernelConfig] | None = None,
               build_first: bool = True, jobs: int | None = None, tolerance: float = 0.01,
               table_root: Path | None = None, log: Callable[[str], None] = print,
               min_seconds: float = 0.1, warm_seconds: float = 1.0, settle_seconds: float = 0.25, reps: int = 6,
               rotations: int = 4) -> Path:
    """Build the kernels (the whole space by default), time them on this GPU, write the user table
    (`<out>/dispatch/...`, or under table_root).  Needs a GPU; checks for one before building.
    Without build_first the candidates are `kernels` from the library already built, or all of its kernels."""
    import torch

    from .arch import get_arch
    from .build import build, output_dir
    from .dispatch import user_dir
    from .profiler import LayerProfiler
    from .runtime import benchmark_switches, load

    if not torch.cuda.is_available():
        raise TuneError("no CUDA GPU visible to PyTorch: `moegen tune` times kernels on the GPU it tunes for")
    switches = benchmark_switches()
    if switches:  # the kernels would follow them, and the table would not say so
        name, value = next(iter(switches.items()))
        raise TuneError(f"{name}={value} is set: a table must time the kernels' own grid and wait choices; "
                        f"unset it to tune")
    if build_first:
        kernels = kernels or get_arch(arch, spec.activations).candidate_configs(spec)
        build(spec, arch, kernels, out_root, jobs=jobs, log=log)
    library = output_dir(spec, arch, out_root)
    layer = load(library, spec=spec)
    candidates = list(layer.kernels) if kernels is None else list(dict.fromkeys(kernels))  # each once
    index = {k.name: i for i, k in enumerate(layer.kernels)}
    missing = [k.name for k in candidates if k.name not in index]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise TuneError(f"--kernels: {missing[0]}{more} not in the library at {library}: expected kernels it holds "
                        f"(tune without --no-build to build them)")
    for gemm in ("gemm1", "gemm2"):
        if not any(k.gemm == gemm for k in candidates):
            raise TuneError(f"--kernels: no {gemm} kernel among the candidates: expected at least one per GEMM")
    log(f"tuning {len(candidates)} kernels of {spec.variant} on {layer.gpu.name}, {len(buckets)} buckets")
    start = time.monotonic()
    profiler = LayerProfiler(layer, min_seconds=min_seconds, warm_seconds=warm_seconds, settle_seconds=settle_seconds,
                             reps=reps, rotations=rotations)
    root = table_root or user_dir(out_root)
    # statistic: how a candidate's replays become its time, recorded so tables say how they were timed
    steady = dict(warm_seconds=warm_seconds, settle_seconds=settle_seconds, min_seconds=min_seconds, reps=reps,
                  rotations=rotations, statistic="mean over the input sets of each set's median replay")
    # A table of this GPU and problem already there (a tune of other buckets, or one cut short) keeps
    # the buckets this tune does not time.
    previous, note = resumable_table(table_path(root, arch, layer.gpu, ProblemKey.of(spec)),
                                     [k.name for k in layer.kernels], contribution=table_root is not None)
    if note:
        log(note)

    def write(choices, measurements, partial: bool) -> dict:
        tuned_with = dict(steady_state=steady, tolerance=tolerance, torch=torch.__version__,
                          **({"partial": True} if partial else {}))
        if previous is None:
            kept = compact(candidates, choices, measurements, tolerance)
            table = make_table(spec, arch, layer.gpu, candidates, kept, measurements, tuned_with)
        else:
            raw = make_table(spec, arch, layer.gpu, candidates, choices, measurements, tuned_with)
            table = merge_into(previous, raw, tolerance)
        save_table(root, table, user_path=table_root is not None)
        return table

    rejected = local_memory_reasons(layer.manifest.data)
    for reason in sorted(rejected.values()):
        log(f"not timing: {reason}")
    try:  # after every bucket: a tune cut short keeps the buckets it finished, as a partial table
        choices, measurements = search(candidates, spec, LibraryIndices(profiler, [index[k.name] for k in candidates]),
                                       buckets, log=log,
                                       on_bucket=lambda c, m: write(c, m, partial=True), rejected=rejected)
    finally:
        profiler.close()
    table = write(choices, measurements, partial=False)
    used = {b[g] for b in table["buckets"] for g in ("gemm1", "gemm2")}
    log(f"{len(measurements)} timings in {time.monotonic() - start:.0f} s; compacted to {len(used)} kernels "
        f"(within {tolerance:.0%} per GEMM of each bucket's best)")
    return table_path(root, arch, layer.gpu, ProblemKey.of(spec))
