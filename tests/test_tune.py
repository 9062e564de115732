"""Tuner with a fake profiler: search, failure handling, bucket lookup, table schema and fallbacks."""
import json
import math
import re
import warnings
from types import SimpleNamespace

import pytest

from moegen import dispatch, tune
from moegen.arch import get_arch
from moegen.dispatch import GpuInfo, find_dispatch, heuristic_choice
from moegen.naming import parse_kernel_name
from moegen.problem import ProblemKey
from moegen.spec import load_model

SPEC = load_model("deepseek-v4-flash")
KERNELS = get_arch("sm90").candidate_configs(SPEC)
NAMES = [k.name for k in KERNELS]
GPU = GpuInfo(name="NVIDIA H200", sm_count=132, driver="580.159.04", cuda="13.0")
PROBLEM = ProblemKey.of(SPEC)


def fake_time(tokens, g1, g2):
    """A made-up cost model with a unique optimum per bucket: block_n near the rows per expert wins."""
    rows = max(1.0, tokens * SPEC.top_k / SPEC.num_experts)
    cost = 0.0
    for k in (KERNELS[g1], KERNELS[g2]):
        cost += abs(math.log2(k.block_n / rows)) * 10 + k.block_m / 64 + k.stages / 100 + k.block_k / 1000
    return cost


def test_search_finds_the_fake_optimum_per_bucket():
    choices, measurements = tune.search(KERNELS, SPEC, fake_time, buckets=(1, 64, 4096), log=lambda m: None)
    for tokens, (g1, g2, us) in choices.items():
        rows = tokens * SPEC.top_k / SPEC.num_experts
        for g, gemm in ((g1, "gemm1"), (g2, "gemm2")):
            k = KERNELS[g]
            assert k.gemm == gemm
            timed = [KERNELS[i] for i, kk in enumerate(KERNELS) if kk.gemm == gemm and tune.pruned(kk, rows) is None]
            best = min(timed, key=lambda c: abs(math.log2(c.block_n / max(1.0, rows))) * 10 + c.block_m / 64
                       + c.stages / 100 + c.block_k / 1000)
            assert k == best
    assert {m.tokens for m in measurements} == {1, 64, 4096}
    assert all(math.isfinite(m.us) for m in measurements)


def _true_best(tokens, gemm):
    rows = tokens * SPEC.top_k / SPEC.num_experts
    timed = [i for i, k in enumerate(KERNELS) if k.gemm == gemm and tune.pruned(k, rows) is None]
    return sorted(timed, key=lambda i: fake_time(tokens, i, i))


def test_confirmation_overrules_one_lucky_timing():
    # The runner-up GEMM1 gets one lucky (halved) first timing: the coordinate stage picks it, the
    # confirmation's repeated timings (median) go back to the true optimum.
    tokens = 64
    best1, runner_up = _true_best(tokens, "gemm1")[:2]
    lucky = {"left": 1}

    def noisy(t, g1, g2):
        us = fake_time(t, g1, g2)
        if g1 == runner_up and lucky["left"]:
            lucky["left"] -= 1
            return us / 2
        return us

    choices, measurements = tune.search(KERNELS, SPEC, noisy, buckets=(tokens,), log=lambda m: None)
    assert choices[tokens][0] == best1 and choices[tokens][1] == _true_best(tokens, "gemm2")[0]
    n1 = len(_true_best(tokens, "gemm1"))
    n2 = len(_true_best(tokens, "gemm2"))
    assert len(measurements) == n1 + n2 + tune.CONFIRM_ROUNDS * tune.CONFIRM_TOP ** 2


def test_pair_failing_in_confirmation_is_out():
    tokens = 64
    best1 = _true_best(tokens, "gemm1")[0]
    calls = {}

    def fails_later(t, g1, g2):
        calls[(g1, g2)] = calls.get((g1, g2), 0) + 1
        if g1 == best1 and calls[(g1, g2)] > 1:  # fine once, then fails to verify
            raise RuntimeError("verification failed: NaN in the output")
        return fake_time(t, g1, g2)

    choices, measurements = tune.search(KERNELS, SPEC, fails_later, buckets=(tokens,), log=lambda m: None)
    assert choices[tokens][0] != best1
    assert any(math.isinf(m.us) and "NaN" in m.reason for m in measurements)


def test_failing_configs_score_infinity_with_their_reason():
    def flaky(tokens, g1, g2):
        if KERNELS[g1].block_n == 16:
            raise RuntimeError("verification failed: relative L2 error 3.1e-01 > 0.02")
        return fake_time(tokens, g1, g2)

    choices, measurements = tune.search(KERNELS, SPEC, flaky, buckets=(1,), log=lambda m: None)
    failed = [m for m in measurements if math.isinf(m.us)]
    assert failed and all("verification failed" in m.reason for m in failed)
    assert KERNELS[choices[1][0]].block_n != 16


def test_kernels_with_local_memory_are_never_timed_or_picked():
    """A kernel ptxas spilled would fail `moegen sass` in the default build: the tuner passes over it
    with the reason from the build's record, even when it would time fastest."""
    favourite = {tokens: _true_best(tokens, "gemm1")[0] for tokens in (64, 4096)}
    manifest = {"resources": {NAMES[i]: {"max_registers": 168, "spill_bytes": 124, "stack_bytes": 32}
                              for i in favourite.values()}}
    rejected = tune.local_memory_reasons(manifest)
    assert set(rejected) == {NAMES[i] for i in favourite.values()}
    timed = []
    choices, measurements = tune.search(KERNELS, SPEC, lambda t, a, b: timed.append((a, b)) or fake_time(t, a, b),
                                        buckets=(64, 4096), log=lambda m: None, rejected=rejected)
    for tokens, (g1, g2, us) in choices.items():
        assert NAMES[g1] not in rejected and math.isfinite(us)
    assert timed and not any(NAMES[a] in rejected for a, b in timed)
    skipped = [m for m in measurements if m.gemm1 in rejected and m.stage == "gemm1"]
    assert skipped and all(math.isinf(m.us) and m.reason == f"ptxas spilled 124 bytes in {m.gemm1}; {m.gemm1} has a "
                           "32-byte stack frame (local memory)" for m in skipped)
    assert tune.local_memory_reasons({"resources": {NAMES[0]: {"spill_bytes": 0, "stack_bytes": 0}}}) == {}


def test_all_failing_raises():
    def broken(tokens, g1, g2):
        raise RuntimeError("launch failed: too many resources requested")

    with pytest.raises(tune.TuneError, match="every gemm1 candidate failed.*too many resources"):
        tune.search(KERNELS, SPEC, broken, buckets=(8,), log=lambda m: None)


def test_a_broken_fallback_gemm2_does_not_stop_the_tune():
    """GEMM1 is timed beside the heuristic's GEMM2: if that one kernel fails, the next GEMM2 stands in."""
    broken2 = heuristic_choice(KERNELS, SPEC, 8)[1]

    def profiler(tokens, g1, g2):
        if g2 == broken2:
            raise RuntimeError("launch failed: misaligned address")
        return fake_time(tokens, g1, g2)

    choices, measurements = tune.search(KERNELS, SPEC, profiler, buckets=(8,), log=lambda m: None)
    assert choices[8][1] != broken2 and math.isfinite(choices[8][2])
    partners = {m.gemm2 for m in measurements if m.stage == "gemm1"}
    assert NAMES[broken2] in partners and len(partners) == 2
    # a rejected (spilling) fallback GEMM2 is never timed, not even as GEMM1's partner
    timed = []
    tune.search(KERNELS, SPEC, lambda t, a, b: timed.append(b) or fake_time(t, a, b), buckets=(8,),
                log=lambda m: None, rejected={NAMES[broken2]: "ptxas spilled 8 bytes"})
    assert timed and broken2 not in timed


def test_every_gemm2_failing_names_a_gemm2_reason():
    n1, calls = len(_true_best(8, "gemm1")), []

    def profiler(tokens, g1, g2):  # the GEMM1 stage runs; every GEMM2 timed after it fails
        calls.append(g2)
        if len(calls) > n1:
            raise RuntimeError("verification failed: NaN in the output")
        return fake_time(tokens, g1, g2)

    with pytest.raises(tune.TuneError, match="every gemm2 candidate failed; first reason: RuntimeError: "
                                             "verification failed: NaN"):
        tune.search(KERNELS, SPEC, profiler, buckets=(8,), log=lambda m: None)


def test_non_positive_times_score_infinity():
    choices, measurements = tune.search(KERNELS, SPEC, lambda t, a, b: -1.0 if a == 0 else fake_time(t, a, b),
                                        buckets=(1,), log=lambda m: None)
    assert choices[1][0] != 0
    assert any(m.gemm1 == NAMES[0] and math.isinf(m.us) and "expected a positive time" in m.reason
               for m in measurements)


def test_buckets_are_tuned_in_order_once():
    seen = []
    choices, _ = tune.search(KERNELS, SPEC, fake_time, buckets=(4096, 1, 4096), log=seen.append)
    assert list(choices) == [1, 4096] and "T=1:" in seen[0]


def test_pruning_rules_are_live():
    big = [k for k in KERNELS if k.block_n == 256][0]
    small = [k for k in KERNELS if k.block_n == 8][0]
    assert "padding" in tune.pruned(big, rows=1.0)
    assert "stream 16+ times" in tune.pruned(small, rows=1000.0)
    assert tune.pruned(small, rows=4.0) is None


def _table(buckets=(1, 16, 256), profiler=fake_time):
    choices, measurements = tune.search(KERNELS, SPEC, profiler, buckets=buckets, log=lambda m: None)
    return tune.make_table(SPEC, "sm90", GPU, KERNELS, choices, measurements), choices, measurements


def test_table_roundtrip_and_dispatch(tmp_path):
    table, choices, measurements = _table()
    path = tune.save_table(tmp_path, table)
    assert path == tmp_path / "sm90" / "nvidia-h200-132sm" / f"{PROBLEM.slug}.json"
    on_disk = json.loads(path.read_text())
    assert on_disk["schema"] == dispatch.TABLE_SCHEMA and on_disk["tuned_with"]["driver"] == "580.159.04"
    assert on_disk["gpu"] == {"name": "NVIDIA H200", "sm_count": 132}  # keyed by GPU and problem, no fingerprint
    assert on_disk["problem"]["top_k"] == 6 and "fingerprint" not in json.dumps(on_disk)
    assert len(on_disk["measurements"]) == len(measurements)
    found, notes = find_dispatch("sm90", GPU, PROBLEM, NAMES, user_root=tmp_path, shipped_root=tmp_path / "none")
    assert found is not None and notes == []
    by_bucket = {b["tokens"]: (NAMES.index(b["gemm1"]), NAMES.index(b["gemm2"])) for b in on_disk["buckets"]}
    assert found.choose(1) == by_bucket[1]
    assert found.choose(2) == by_bucket[16]  # smallest bucket >= T
    assert found.choose(16) == by_bucket[16]
    assert found.choose(100000) == by_bucket[256]  # beyond the last bucket: the last


def test_lookup_order_user_shipped_other_gpu_heuristic(tmp_path):
    user, shipped = tmp_path / "user", tmp_path / "shipped"
    table, _, _ = _table(buckets=(1,))
    tune.save_table(shipped, table)
    # this GPU, a shipped table: used; another driver: used with a note
    other_driver = GpuInfo("NVIDIA H200", 132, "575.00", "13.0")
    found, notes = find_dispatch("sm90", other_driver, PROBLEM, NAMES, user_root=user, shipped_root=shipped)
    assert found is not None and "tuned with driver 580.159.04 (this machine 575.00); using it anyway" in notes[0]
    # another GPU of the arch: the shipped table, with a note saying whose it is
    h100 = GpuInfo("NVIDIA H100 80GB HBM3", 132, "580.159.04", "13.0")
    found, notes = find_dispatch("sm90", h100, PROBLEM, NAMES, user_root=user, shipped_root=shipped)
    assert found is not None and "no dispatch table for NVIDIA H100 80GB HBM3" in notes[0]
    assert "tuned on NVIDIA H200" in notes[0]
    # a user table takes precedence
    user_table = dict(table, buckets=[dict(table["buckets"][0], gemm1=NAMES[0])])
    tune.save_table(user, user_table)
    found, _ = find_dispatch("sm90", GPU, PROBLEM, NAMES, user_root=user, shipped_root=shipped)
    assert found.source.startswith(str(user)) and found.choose(1)[0] == 0
    # another problem: nothing, the heuristic
    other = ProblemKey.of(SPEC.with_parallel(ep_size=8))
    found, notes = find_dispatch("sm90", GPU, other, NAMES, user_root=user, shipped_root=shipped)
    assert found is None and "using the block_n heuristic" in notes[-1]


def test_table_naming_a_kernel_the_library_lacks_is_passed_over(tmp_path):
    table, _, _ = _table(buckets=(1,))
    tune.save_table(tmp_path, table)
    found, notes = find_dispatch("sm90", GPU, PROBLEM, NAMES[:3], user_root=tmp_path, shipped_root=tmp_path / "x")
    assert found is None and "which the library does not have" in notes[0]


@pytest.mark.parametrize("text, why", [("{", "not valid JSON"), ('{"schema": 1}', "schema 1, expected 2"),
                                       ('{"schema": 2, "buckets": []}', "expected a non-empty list"),
                                       ('{"schema": 2, "buckets": [{"tokens": 1, "gemm1": "x", "gemm2": "y"}]}',
                                        "expected tokens > 0 and a gemm1 and a gemm2 kernel name"),
                                       ('{"schema": 2, "tuned_with": [], "buckets": []}',
                                        "field 'tuned_with' = \\[\\]: expected an object"),
                                       ('{"schema": 2, "buckets": [{"tokens": true}]}', "expected tokens > 0"),
                                       ("[" * 100000 + "]" * 100000, "nested too deeply|not valid JSON")])
def test_broken_table_files_are_named(tmp_path, text, why):
    path = dispatch.table_path(tmp_path, "sm90", GPU, PROBLEM)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(dispatch.DispatchError, match=why):
        dispatch.read_table(path)
    found, notes = find_dispatch("sm90", GPU, PROBLEM, NAMES, user_root=tmp_path, shipped_root=tmp_path / "x")
    assert found is None and re.search(why.split(",")[0], notes[0])


def _valid_table_text(**changes) -> str:
    table = {"schema": 2, "arch": "sm90", "gpu": {"name": GPU.name, "sm_count": GPU.sm_count},
             "problem_key": PROBLEM.slug, "tuned_with": {},
             "buckets": [{"tokens": 4, "gemm1": NAMES[0], "gemm2": NAMES[-1], "us": 1.0}],
             "measurements": [[4, NAMES[0], NAMES[-1], 1.0, 1980, 700, "gemm2", ""]]}
    return json.dumps({k: v for k, v in dict(table, **changes).items() if v is not None})


@pytest.mark.parametrize("changes, why", [
    (dict(measurements="x"), "field 'measurements' = 'x': expected a list of timings"),
    (dict(measurements=[[1]]), r"measurement \[1\]: expected \[tokens, gemm1"),
    (dict(gpu=None), "field 'gpu' = None: expected"),
    (dict(gpu={"name": "NVIDIA H100", "sm_count": 132}), "field 'gpu' = 'nvidia-h100-132sm': expected"),
    (dict(problem_key="e8-l8-k2-h512-i256"), "field 'problem_key' = 'e8-l8-k2-h512-i256': expected"),
    (dict(problem_key=7), "field 'problem_key' = 7: expected e<experts>"),
    (dict(arch="sm100"), "field 'arch' = 'sm100': expected 'sm90'"),
    (dict(buckets=[{"tokens": 4, "gemm1": NAMES[0], "gemm2": NAMES[-1], "us": "fast"}]), "bucket .*: field 'us' = 'fast'"),
    (dict(buckets=[{"tokens": 4, "gemm1": NAMES[0], "gemm2": NAMES[-1], "us": math.nan}]), "bucket .*: field 'us' = nan"),
    (dict(measurements=[[4, NAMES[0], NAMES[-1], -math.inf, 1980, 700, "gemm2", ""]]), r"measurement \[4, "),
])
def test_tables_are_checked_before_use(tmp_path, changes, why):
    """Every field the runtime and the tuner read is checked, and a table filed under another GPU's or
    problem's name is refused: one line naming the file, never a KeyError later."""
    path = dispatch.table_path(tmp_path, "sm90", GPU, PROBLEM)
    path.parent.mkdir(parents=True)
    path.write_text(_valid_table_text())
    assert dispatch.read_table(path)["measurements"]
    path.write_text(_valid_table_text(**changes))
    with pytest.raises(dispatch.DispatchError, match=f"{re.escape(str(path))}: {why}"):
        dispatch.read_table(path)
    table, note = tune.resumable_table(path, NAMES)
    assert table is None and note.startswith("replacing it: ") and str(path) in note


def test_a_table_without_timings_or_tuned_with_still_merges(tmp_path):
    path = dispatch.table_path(tmp_path, "sm90", GPU, PROBLEM)
    path.parent.mkdir(parents=True)
    path.write_text(_valid_table_text(measurements=None, tuned_with=None))
    table, _ = tune.resumable_table(path, NAMES)
    assert table["measurements"] == [] and table["tuned_with"] == {}
    merged = tune.merge_tables(table, json.loads(_valid_table_text()))
    assert merged["buckets"][0]["tokens"] == 4


def test_measurements_carry_clock_and_power():
    class Timed(float):
        power = type("P", (), {"sm_mhz_median": 1755.0, "power_w_median": 699.0})()

    _, measurements = tune.search(KERNELS, SPEC, lambda t, a, b: Timed(fake_time(t, a, b)), buckets=(4,),
                                  log=lambda m: None)
    assert all(m.sm_mhz == 1755.0 and m.power_w == 699.0 for m in measurements)
    table = tune.make_table(SPEC, "sm90", GPU, KERNELS, {4: (0, len(KERNELS) - 1, 1.0)}, measurements)
    assert table["measurements"][0][4:7] == [1755, 699, "gemm1"]


def gentle_time(tokens, g1, g2):
    """Like fake_time, but a tile one octave of block_n off costs 0.4 % more, not 10 units."""
    rows = max(1.0, tokens * SPEC.top_k / SPEC.num_experts)
    cost = 100.0 * tokens ** 0.5
    for k in (KERNELS[g1], KERNELS[g2]):
        cost *= 1 + 0.004 * abs(math.log2(k.block_n / rows)) + k.block_m / 64e4 + k.stages / 1e5 + k.block_k / 1e6
    return cost


def test_compaction_keeps_few_kernels_within_tolerance():
    buckets = tuple(2 ** i for i in range(8, 15))  # 6 ... 384 rows per expert: a new best tile every octave
    choices, measurements = tune.search(KERNELS, SPEC, gentle_time, buckets=buckets, log=lambda m: None)
    tuned = {n for g1, g2, _ in choices.values() for n in (g1, g2)}
    kept = tune.compact(KERNELS, choices, measurements, tolerance=0.01)
    used = {n for g1, g2, _ in kept.values() for n in (g1, g2)}
    assert len(used) < len(tuned), (sorted(NAMES[i] for i in tuned), sorted(NAMES[i] for i in used))
    stage = {(m.tokens, m.stage, m.gemm1 if m.stage == "gemm1" else m.gemm2): m.us for m in measurements}
    for t, (g1, g2, _) in kept.items():
        for gemm, k in (("gemm1", g1), ("gemm2", g2)):
            best = min(us for (tt, st, _), us in stage.items() if tt == t and st == gemm)
            assert stage[(t, gemm, NAMES[k])] <= 1.01 * best
    assert tune.compact(KERNELS, choices, measurements, tolerance=0.0) == choices  # nothing to give up
    # the same from a table's kept timings
    raw = tune.make_table(SPEC, "sm90", GPU, KERNELS, choices, measurements)
    offline = tune.compact_table(raw, 0.01)
    assert [(b["gemm1"], b["gemm2"]) for b in offline["buckets"]] == \
        [(NAMES[g1], NAMES[g2]) for _, (g1, g2, _) in sorted(kept.items())]


def test_heuristic_and_one_time_warning():
    g1, g2 = heuristic_choice(KERNELS, SPEC, 1)
    assert KERNELS[g1].gemm == "gemm1" and KERNELS[g1].block_n == 8
    g1, g2 = heuristic_choice(KERNELS, SPEC, 16384)  # 384 rows per expert: the largest tile
    assert KERNELS[g2].block_n == 256
    dispatch._warned.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dispatch.warn_once("no dispatch table for X")
        dispatch.warn_once("no dispatch table for X")
    assert len(seen) == 1 and "no dispatch table for X" in str(seen[0].message)


def test_partial_table_leaves_token_counts_beyond_its_last_bucket_to_the_heuristic(tmp_path):
    table, _, _ = _table(buckets=(1, 16))
    table["tuned_with"]["partial"] = True
    tune.save_table(tmp_path, table)
    found, _ = find_dispatch("sm90", GPU, PROBLEM, NAMES, user_root=tmp_path, shipped_root=tmp_path / "none")
    assert found.choose(16) is not None and found.choose(17) is None
    table["tuned_with"]["partial"] = False
    tune.save_table(tmp_path, table)
    found, _ = find_dispatch("sm90", GPU, PROBLEM, NAMES, user_root=tmp_path, shipped_root=tmp_path / "none")
    assert found.choose(17) == found.choose(16)


def test_beyond_a_partial_user_table_the_shipped_table_answers(tmp_path):
    user, shipped = tmp_path / "user", tmp_path / "shipped"
    whole, _, _ = _table(buckets=(1, 4096))
    tune.save_table(shipped, whole)
    cut, _, _ = _table(buckets=(1, 16))
    cut["buckets"][0]["gemm1"] = NAMES[0]  # tell the two tables apart
    cut["tuned_with"]["partial"] = True
    tune.save_table(user, cut)
    found, notes = find_dispatch("sm90", GPU, PROBLEM, NAMES, user_root=user, shipped_root=shipped)
    shipped_pick = {b["tokens"]: (NAMES.index(b["gemm1"]), NAMES.index(b["gemm2"])) for b in whole["buckets"]}
    assert found.source.startswith(str(user)) and found.choose(1)[0] == 0
    assert found.choose(17) == found.choose(100000) == shipped_pick[4096] and notes == []
    # another GPU's table stands in with a note that says for which T
    h100 = GpuInfo("NVIDIA H100 80GB HBM3", 132, "580.159.04", "13.0")
    tune.save_table(user, dict(cut, gpu={"name": h100.name, "sm_count": 132}))
    found, notes = find_dispatch("sm90", h100, PROBLEM, NAMES, user_root=user, shipped_root=shipped)
    assert found.choose(17) == shipped_pick[4096] and "beyond T = 16, the last bucket of the partial table" in notes[0]


def test_tables_of_a_newer_schema_or_with_a_bucket_twice_are_refused(tmp_path):
    table, _, _ = _table(buckets=(1, 16))
    path = tune.save_table(tmp_path, table)
    path.write_text(json.dumps(dict(table, buckets=table["buckets"] + table["buckets"][:1])))
    with pytest.raises(dispatch.DispatchError, match="two buckets for tokens = 1"):
        dispatch.read_table(path)
    path.write_text(json.dumps(dict(table, schema=dispatch.TABLE_SCHEMA + 1)))
    with pytest.raises(dispatch.NewerTableError, match="written by a newer moegen.*upgrade moegen"):
        dispatch.read_table(path)
    for contribution in (False, True):  # a tune never overwrites newer work
        with pytest.raises(tune.TuneError, match="not replacing it"):
            tune.resumable_table(path, NAMES, contribution=contribution)
    path.write_text("{")  # a contribution is the project's table: fixed or moved by hand, never replaced
    with pytest.raises(tune.TuneError, match="not valid JSON.*fix or move it first"):
        tune.resumable_table(path, NAMES, contribution=True)


def test_default_build_of_a_partial_table_adds_the_fallback_kernels(tmp_path):
    from moegen.arch import get_arch
    from moegen.kernel_sets import default_kernels
    table, _, _ = _table(buckets=(1,))
    picks = {table["buckets"][0]["gemm1"], table["buckets"][0]["gemm2"]}
    tune.save_table(tmp_path, table)
    assert {k.name for k in default_kernels(SPEC, "sm90", shipped_root=tmp_path)} == picks
    table["tuned_with"]["partial"] = True
    tune.save_table(tmp_path, table)
    fallback = {k.name for k in get_arch("sm90").fallback_configs(SPEC)}
    assert {k.name for k in default_kernels(SPEC, "sm90", shipped_root=tmp_path)} == picks | fallback


def test_searched_pairs_are_the_search_picks():
    table, choices, _ = _table(buckets=(1, 16, 256))
    pairs = tune.searched_pairs(table)
    assert {t: (NAMES.index(g1), NAMES.index(g2)) for t, (g1, g2, _) in pairs.items()} == \
        {t: (g1, g2) for t, (g1, g2, _) in choices.items()}


def test_merged_tunes_pick_as_one_tune_over_all_buckets():
    whole, _, _ = _table(buckets=(1, 16, 256, 4096))
    first, _, _ = _table(buckets=(1, 16, 256))
    first["tuned_with"] = dict(first["tuned_with"], partial=True, commit="aaaaaaa")  # cut short before 4096
    rest, _, _ = _table(buckets=(4096,))
    merged = tune.merge_tables(first, rest)
    assert merged["buckets"] == whole["buckets"]
    assert not dispatch.is_partial(merged) and merged["tuned_with"]["tolerance"] == 0.0
    assert "aaaaaaa" in merged["tuned_with"]["commits"]
    assert sorted(map(json.dumps, merged["measurements"])) == sorted(map(json.dumps, whole["measurements"]))
    # a bucket both tunes timed keeps the newer timings only; a newer partial tune short of the older
    # table's largest bucket leaves the merge whole
    again, _, _ = _table(buckets=(16,), profiler=lambda t, g1, g2: 2 * fake_time(t, g1, g2))
    again["tuned_with"] = dict(again["tuned_with"], partial=True)
    again["tuned_with"]["commit"] = "bbbbbbb"
    merged2 = tune.merge_tables(merged, again)
    assert {m[3] for m in merged2["measurements"] if m[0] == 16} == {m[3] for m in again["measurements"]}
    # the third tune's merge still names the first one: provenance is not only the last two tables'
    assert {"aaaaaaa", "bbbbbbb"} <= set(merged2["tuned_with"]["commits"])
    assert not dispatch.is_partial(merged2)
    again["tuned_with"] = dict(again["tuned_with"], partial=False)
    assert dispatch.is_partial(tune.merge_tables(first, again))  # the cut-short tune holds the largest bucket


def test_a_tune_resumes_a_user_table_that_picks_its_kernels_and_a_contribution_whole(tmp_path):
    table, _, _ = _table(buckets=(1, 16))
    path = tune.save_table(tmp_path, table)
    found, note = tune.resumable_table(path, NAMES)
    assert found == json.loads(path.read_text()) and str(path) in note
    picks = {b[g] for b in table["buckets"] for g in ("gemm1", "gemm2")}
    fewer = sorted(picks | {NAMES[0], NAMES[-1]})  # a library with the picks and little else
    found, _ = tune.resumable_table(path, fewer)
    assert found["buckets"] == table["buckets"] and found["measurements"]
    assert all(m[1] in fewer and m[2] in fewer for m in found["measurements"])
    assert {b[g] for b in tune.merge_tables(found, _table(buckets=(256,))[0])["buckets"][:2]
            for g in ("gemm1", "gemm2")} <= set(fewer)
    found, note = tune.resumable_table(path, [n for n in NAMES if n not in picks])
    assert found is None and "does not have" in note
    # a contribution (--table-root) keeps its other buckets' picks and timings whatever this library has
    found, note = tune.resumable_table(path, [n for n in NAMES if n not in picks], contribution=True)
    assert found == json.loads(path.read_text()) and "keep their picks" in note
    merged = tune.merge_tables(found, _table(buckets=(256,))[0])
    assert [b for b in merged["buckets"] if b["tokens"] != 256] == [b for b in table["buckets"] if b["tokens"] != 256]
    path.write_text("{")
    found, note = tune.resumable_table(path, NAMES)
    assert found is None and "not valid JSON" in note
    assert tune.resumable_table(tmp_path / "absent.json", NAMES) == (None, "")


def test_compaction_never_keeps_a_pair_timed_slower_than_tolerance():
    """Each GEMM's stage admits a kernel within tolerance, but the pair of two such kernels can be
    further off: a compacted pair whose pair timing is beyond tolerance goes back to the tuned pair."""
    names = ["moegen_sm90_gemm1_m64n8k64s4", "moegen_sm90_gemm1_m64n16k64s4",
             "moegen_sm90_gemm2_m64n8k64s4", "moegen_sm90_gemm2_m64n16k64s4"]
    kernels = [parse_kernel_name(n) for n in names]
    M = tune.Measurement
    # bucket 1 wants (0, 2); bucket 2 wants (1, 3) but admits (0, 2) per stage, within 1 %
    measurements = [M(1, names[0], names[2], 10.0, "", None, None, "gemm1"),
                    M(1, names[1], names[2], 12.0, "", None, None, "gemm1"),
                    M(1, names[0], names[2], 10.0, "", None, None, "gemm2"),
                    M(1, names[0], names[3], 12.0, "", None, None, "gemm2"),
                    M(2, names[1], names[3], 100.0, "", None, None, "gemm1"),
                    M(2, names[0], names[3], 100.5, "", None, None, "gemm1"),
                    M(2, names[1], names[3], 100.0, "", None, None, "gemm2"),
                    M(2, names[1], names[2], 100.5, "", None, None, "gemm2")]
    choices = {1: (0, 2, 10.0), 2: (1, 3, 100.0)}
    assert tune.compact(kernels, choices, measurements, 0.01)[2][:2] == (0, 2)  # never timed as a pair: compacted
    timed = measurements + [M(2, names[0], names[2], 102.6, "", None, None, "confirm")]
    assert tune.compact(kernels, choices, timed, 0.01)[2] == (1, 3, 100.0)  # 2.6 % slower: back to the tuned pair
    close = measurements + [M(2, names[0], names[2], 100.8, "", None, None, "confirm")]
    assert tune.compact(kernels, choices, close, 0.01)[2] == (0, 2, 100.8)
    # scored by the median of its timings, as search scores pairs: one lucky timing does not keep it
    lucky = measurements + [M(2, names[0], names[2], t, "", None, None, "confirm") for t in (100.5, 101.6, 107.0)]
    assert tune.compact(kernels, choices, lucky, 0.01)[2] == (1, 3, 100.0)
    steady = measurements + [M(2, names[0], names[2], t, "", None, None, "confirm") for t in (100.5, 100.9, 107.0)]
    assert tune.compact(kernels, choices, steady, 0.01)[2] == (0, 2, 100.9)
    failed = steady + [M(2, names[0], names[2], math.inf, "launch failed", None, None, "confirm")]
    assert tune.compact(kernels, choices, failed, 0.01)[2] == (1, 3, 100.0)


def test_a_merged_tune_leaves_the_pairs_of_buckets_it_did_not_time():
    """Compacting the merged table would re-pick every bucket among its timings; the buckets this tune
    did not time keep the pairs the table had (benched, shipped), and the timed ones get the new picks."""
    previous = tune.compact_table(_table(buckets=(1, 16))[0], 0.01)
    other = next((g1, g2) for g1 in NAMES if "gemm1" in g1 for g2 in NAMES if "gemm2" in g2
                 and (g1, g2) != (previous["buckets"][0]["gemm1"], previous["buckets"][0]["gemm2"]))
    previous["buckets"][0] = dict(previous["buckets"][0], gemm1=other[0], gemm2=other[1])  # T = 1, as shipped
    raw = _table(buckets=(16, 256))[0]
    merged = tune.merge_into(previous, raw, 0.01)
    assert [b["tokens"] for b in merged["buckets"]] == [1, 16, 256]
    assert merged["buckets"][0] == previous["buckets"][0]
    recompacted = tune.compact_table(tune.merge_tables(previous, raw), 0.01)
    assert (recompacted["buckets"][0]["gemm1"], recompacted["buckets"][0]["gemm2"]) != other
    assert merged["buckets"][1:] == recompacted["buckets"][1:]


def test_a_lost_cuda_context_stops_the_tune_and_keeps_the_finished_buckets():
    saved = []

    class Crashing:
        alive = True

        def __call__(self, tokens, g1, g2):
            if tokens == 16:
                self.alive = False  # an illegal address: sticky, every later call fails
            if not self.alive:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            return fake_time(tokens, g1, g2)

        def context_alive(self):
            return self.alive

    with pytest.raises(tune.TuneError, match="T = 16, moegen_sm90_gemm1_.*illegal memory access.*CUDA context is lost"):
        tune.search(KERNELS, SPEC, Crashing(), buckets=(1, 16, 64), log=lambda m: None,
                    on_bucket=lambda choices, measurements: saved.append(sorted(choices)))
    assert saved == [[1]]  # the bucket finished before the crash is handed over to be saved

    failing_kernel = next(i for i, k in enumerate(KERNELS) if k.gemm == "gemm1" and tune.pruned(k, 0.1) is None)

    class Failing:  # a kernel that fails on its own leaves the context usable: it just scores infinity
        def __call__(self, tokens, g1, g2):
            if g1 == failing_kernel:
                raise RuntimeError("moegen: launch failed (too many resources requested)")
            return fake_time(tokens, g1, g2)

        def context_alive(self):
            return True

    choices, measurements = tune.search(KERNELS, SPEC, Failing(), buckets=(1,), log=lambda m: None)
    assert any(math.isinf(m.us) and "too many resources" in m.reason for m in measurements)


def test_a_shipped_table_picking_a_kernel_the_build_cannot_take_is_named(tmp_path):
    from moegen.kernel_sets import default_kernels
    from moegen.paths import CONFIG_DIR
    src = dispatch.table_path(CONFIG_DIR / "dispatch", "sm90", GPU, PROBLEM)
    path = dispatch.table_path(tmp_path, "sm90", GPU, PROBLEM)
    path.parent.mkdir(parents=True)
    table = json.loads(src.read_text())
    path.write_text(json.dumps(table))
    assert default_kernels(SPEC, "sm90", tmp_path) == default_kernels(SPEC, "sm90")
    for name, why in (("moegen_sm100_gemm1_m128n64k128s0", "not an sm90 kernel"),
                      ("moegen_sm90_gemm1_m64n8k128s4_fp8", "e4m3 activations, but this build's are bf16"),
                      ("moegen_sm90_gemm1_m64n8k96s4", "block_k = 96 is not on the sm90 axis")):
        table["buckets"][0]["gemm1"] = name
        path.write_text(json.dumps(table))
        with pytest.raises(dispatch.DispatchError,
                           match=f"{re.escape(str(path))}: bucket tokens=1 gemm1 '{name}': .*{why}"):
            default_kernels(SPEC, "sm90", tmp_path)


def test_a_failed_warm_up_is_not_charged_to_a_candidate_and_leaves_no_stale_inputs(monkeypatch):
    """The profiler starts a bucket (inputs, the heuristic pair's graphs, warm-up) before its first
    candidate: if that fails, the bucket is not started, so the next candidate retries it rather than
    running on the previous bucket's inputs without a warm-up."""
    from moegen import profiler
    p = object.__new__(profiler.LayerProfiler)
    p.layer, p.weights, p.seed, p.rotations, p.warm_seconds = SimpleNamespace(spec=SPEC), None, 0, 2, 0.0
    p._tokens, p.inputs, p.ref = 4, ["inputs of T = 4"], None
    monkeypatch.setattr(profiler, "random_inputs", lambda spec, T, dev, seed: f"inputs of T = {T}")
    monkeypatch.setattr(profiler, "timing_pool", lambda: None)

    def broken_capture(*args):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(profiler, "capture", broken_capture)
    with pytest.raises(RuntimeError, match="warming the GPU up with the heuristic pair failed: CUDA error: out of"):
        p._start_bucket(64, (0, 1))
    assert p._tokens is None and p.inputs == ["inputs of T = 64"] * 2
    monkeypatch.setattr(profiler, "capture", lambda *args: "graph")
    monkeypatch.setattr(profiler, "warm_up", lambda graphs, seconds: None)
    p._start_bucket(64, (0, 1))
    assert p._tokens == 64


def _fake_library(monkeypatch, tmp_path, timed):
    """tune_model over a fake loaded library holding KERNELS; `timed` collects the names it times."""
    import torch

    from moegen import profiler, runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    layer = SimpleNamespace(kernels=list(KERNELS), gpu=GPU, spec=SPEC, manifest=SimpleNamespace(data={}))
    monkeypatch.setattr(runtime, "load", lambda path, spec: layer)

    class FakeProfiler:
        def __init__(self, layer, **kwargs):
            pass

        def __call__(self, tokens, g1, g2):
            timed.update((NAMES[g1], NAMES[g2]))
            return fake_time(tokens, g1, g2)

        def close(self):
            pass

    monkeypatch.setattr(profiler, "LayerProfiler", FakeProfiler)
    for name in runtime.BENCHMARK_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    return dict(spec=SPEC, arch="sm90", out_root=tmp_path, buckets=(1, 64), build_first=False, log=lambda m: None)


def test_tune_without_a_build_times_only_the_named_kernels(monkeypatch, tmp_path):
    timed = set()
    args = _fake_library(monkeypatch, tmp_path, timed)
    named = [k for k in KERNELS if k.block_m == 64][:6] + [k for k in KERNELS if k.gemm == "gemm2"][:3]
    path = tune.tune_model(kernels=named, **args)
    assert timed <= {k.name for k in named}
    table = json.loads(path.read_text())
    assert {b[g] for b in table["buckets"] for g in ("gemm1", "gemm2")} <= {k.name for k in named}
    assert table["tuned_with"]["kernels"] == len(named)
    timed.clear()  # no list: the library's own kernels
    tune.tune_model(kernels=None, **args)
    assert len(timed) > len(named)


def test_tune_refuses_kernels_the_library_lacks_one_gemm_or_a_benchmark_switch(monkeypatch, tmp_path):
    args = _fake_library(monkeypatch, tmp_path, set())
    absent = parse_kernel_name(NAMES[0].replace(f"s{KERNELS[0].stages}", "s99"))
    with pytest.raises(tune.TuneError, match=f"--kernels: {absent.name} not in the library"):
        tune.tune_model(kernels=[absent, KERNELS[1]], **args)
    with pytest.raises(tune.TuneError, match="no gemm2 kernel"):
        tune.tune_model(kernels=[k for k in KERNELS if k.gemm == "gemm1"], **args)
    monkeypatch.setenv("MOEGEN_GRID", "tiles")
    with pytest.raises(tune.TuneError, match="MOEGEN_GRID=tiles is set"):
        tune.tune_model(kernels=None, **args)
