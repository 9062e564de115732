"""Tuner with a fake profiler: search, failure handling, bucket lookup, table schema and fallbacks."""
import json
import math
import warnings

import pytest

from moegen import tune
from moegen.config_space import candidate_configs
from moegen.spec import load_model

SPEC = load_model("deepseek-v4-flash")
KERNELS = candidate_configs(SPEC, "sm90")
GPU = tune.GpuInfo(name="NVIDIA H200", sm_count=132, driver="580.159.04", cuda="13.0")


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


def test_all_failing_raises():
    def broken(tokens, g1, g2):
        raise RuntimeError("launch failed: too many resources requested")

    with pytest.raises(tune.TuneError, match="every gemm1 candidate failed.*too many resources"):
        tune.search(KERNELS, SPEC, broken, buckets=(8,), log=lambda m: None)


def test_pruning_rules_are_live():
    big = [k for k in KERNELS if k.block_n == 256][0]
    small = [k for k in KERNELS if k.block_n == 8][0]
    assert "padding" in tune.pruned(big, rows=1.0)
    assert "stream 16+ times" in tune.pruned(small, rows=1000.0)
    assert tune.pruned(small, rows=4.0) is None


def test_table_roundtrip_and_dispatch(tmp_path):
    choices, measurements = tune.search(KERNELS, SPEC, fake_time, buckets=(1, 16, 256), log=lambda m: None)
    table = tune.make_table(SPEC, "sm90", "f" * 64, GPU, KERNELS, choices, measurements)
    path = tune.save_table(tmp_path, table)
    assert path == tmp_path / "dispatch" / "nvidia-h200-132sm.json"
    on_disk = json.loads(path.read_text())
    assert on_disk["schema"] == tune.TABLE_SCHEMA and on_disk["gpu"]["driver"] == "580.159.04"
    assert len(on_disk["measurements"]) == len(measurements)
    names = [k.name for k in KERNELS]
    dispatch, why = tune.load_dispatch(tmp_path, GPU, "f" * 64, names)
    assert dispatch is not None and why == ""
    by_bucket = {b["tokens"]: (names.index(b["gemm1"]), names.index(b["gemm2"])) for b in on_disk["buckets"]}
    assert dispatch.choose(1) == by_bucket[1]
    assert dispatch.choose(2) == by_bucket[16]  # smallest bucket >= T
    assert dispatch.choose(16) == by_bucket[16]
    assert dispatch.choose(100000) == by_bucket[256]  # beyond the last bucket: the last


@pytest.mark.parametrize("change, why", [
    (dict(fingerprint="0" * 64), "another build of the library"),
    (dict(gpu=tune.GpuInfo("NVIDIA H200", 132, "575.00", "13.0")), "re-run `moegen tune`"),
    (dict(gpu=tune.GpuInfo("NVIDIA H100 80GB HBM3", 132, "580.159.04", "13.0")), "no dispatch table for NVIDIA H100"),
])
def test_table_mismatch_falls_back(tmp_path, change, why):
    choices, measurements = tune.search(KERNELS, SPEC, fake_time, buckets=(1,), log=lambda m: None)
    tune.save_table(tmp_path, tune.make_table(SPEC, "sm90", "f" * 64, GPU, KERNELS, choices, measurements))
    dispatch, reason = tune.load_dispatch(tmp_path, change.get("gpu", GPU), change.get("fingerprint", "f" * 64),
                                          [k.name for k in KERNELS])
    assert dispatch is None and why in reason


def test_table_naming_unknown_kernel_is_rejected(tmp_path):
    choices, measurements = tune.search(KERNELS, SPEC, fake_time, buckets=(1,), log=lambda m: None)
    tune.save_table(tmp_path, tune.make_table(SPEC, "sm90", "f" * 64, GPU, KERNELS, choices, measurements))
    dispatch, reason = tune.load_dispatch(tmp_path, GPU, "f" * 64, [k.name for k in KERNELS[:3]])
    assert dispatch is None and "does not have" in reason


def test_heuristic_and_one_time_warning():
    g1, g2 = tune.heuristic_choice(KERNELS, SPEC, 1)
    assert KERNELS[g1].gemm == "gemm1" and KERNELS[g1].block_n == 8
    g1, g2 = tune.heuristic_choice(KERNELS, SPEC, 16384)  # 384 rows per expert: the largest tile
    assert KERNELS[g2].block_n == 256
    tune._warned.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tune.warn_once("no dispatch table for X")
        tune.warn_once("no dispatch table for X")
    assert len(seen) == 1 and "heuristic" in str(seen[0].message)
