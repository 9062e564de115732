"""The tuner's and the bench's timing on an SM90 GPU (marker `gpu`; skipped without one): replays rotate
through the input sets (routing draws), and a timing is the mean over the sets of each set's median
(moegen.profiler.mean_of_draw_medians).  An EP rank at T = 1, where the draws' work differs most."""
import os

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an SM90 (compute capability 9.0) GPU", allow_module_level=True)

from gpu_variants import layer_and_weights  # noqa: E402
from moegen.bench import Ceilings, bench_layers  # noqa: E402
from moegen.profiler import LayerProfiler, mean_of_draw_medians  # noqa: E402

_SEED = int(os.environ["MOEGEN_TEST_SEED"])
VARIANT = "qwen3-30b-a3b-ep1of4"
SETS = 4


def test_the_tuners_timing_is_the_draws_mean():
    layer, _ = layer_and_weights(VARIANT, _SEED)
    profiler = LayerProfiler(layer, rotations=SETS, reps=3, min_seconds=0.01, warm_seconds=0.05,
                             settle_seconds=0.01, seed=_SEED)
    try:
        timing = profiler(1, *layer.choose_kernels(1))
    finally:
        profiler.close()
    assert timing.input_sets == SETS and len(timing.times_us) >= 3 * SETS and len(timing.times_us) % SETS == 0
    assert timing.us == mean_of_draw_medians(timing.times_us, SETS)
    assert 0 < min(timing.times_us) <= timing.us <= max(timing.times_us)


def test_the_bench_rows_report_the_draws_mean():
    layer, _ = layer_and_weights(VARIANT, _SEED)
    rows = bench_layers({"default": layer}, [1, 64], Ceilings(read_tbs=4.0, bf16_tflops=700.0), reps=3,
                        rotations=SETS, seed=_SEED, warm_seconds=0.05, min_seconds=0.01, rounds=2,
                        settle_seconds=0.01, log=lambda m: None)
    assert [r.tokens for r in rows] == [1, 64]
    for r in rows:
        assert 0 < r.p10_us <= r.p90_us and r.time_us > 0 and r.floor_us > 0
        assert r.time_over_floor == pytest.approx(r.time_us / r.floor_us)
