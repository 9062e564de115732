"""Benchmark and power-state bookkeeping without a GPU: the table, and the monitor's window summary."""
from moegen.bench import BenchRow, markdown_table
from moegen.gpu_monitor import SW_POWER_CAP, GpuMonitor, PowerState, Window


def row(**kw):
    base = dict(library="default", tokens=1024, kernels="a,b", time_us=1216.1, p10_us=1136.4, p90_us=1251.4,
                weight_bytes=1.6e9, flops=1e12, floor_us=574.1, time_over_floor=2.12, achieved_tbs=1.3,
                achieved_tflops=800.0)
    base.update(kw)
    return BenchRow(**base)


def test_markdown_table_rows_match_the_header():
    text = markdown_table([row(), row(library="tuned", sm_mhz_min=1635.0, sm_mhz_median=1740.0, power_w_median=699.4,
                                      power_capped_share=1.0, joules_per_call=0.8)])
    lines = text.splitlines()
    n = lines[0].count("|")
    assert all(line.count("|") == n for line in lines)
    assert "| default | 1024 | 1216.1 | 1136.4-1251.4 | 574.1 | 2.12 |" in lines[2]
    assert "| - | - | - | - |" in lines[2]  # no monitor: no clock, power or energy
    assert "| 1635-1740 | 699 | 100 % | 800.00 |" in lines[3]


def test_monitor_summary_of_a_window():
    m = GpuMonitor.__new__(GpuMonitor)  # no NVML here: feed samples by hand
    m.samples = [(1.0, 1980.0, 300.0, 0), (2.0, 1700.0, 700.0, SW_POWER_CAP), (3.0, 1650.0, 699.0, SW_POWER_CAP | 1),
                 (9.0, 345.0, 80.0, 0)]
    s = m.summary(1.5, 3.5, energy0=1000, energy1=4500)
    assert s == PowerState(sm_mhz_min=1650.0, sm_mhz_median=1675.0, power_w_median=699.5, power_capped_share=1.0,
                           energy_j=3.5)
    assert m.summary(4.0, 5.0, None, None) == PowerState()


def test_monitor_without_nvml_reads_nothing_and_fails_nothing():
    m = GpuMonitor(device="cuda")  # no GPU on a CI machine
    with Window(m) as w:
        pass
    assert w.seconds >= 0
    if not m.available:
        assert w.state == PowerState()
    m.close()


def test_monitor_summary_over_several_windows_skips_the_gaps():
    m = GpuMonitor.__new__(GpuMonitor)
    m.samples = [(1.0, 1800.0, 690.0, SW_POWER_CAP), (2.0, 1980.0, 300.0, 0), (3.0, 1700.0, 700.0, SW_POWER_CAP)]
    s = m.summary_over([(0.5, 1.5), (2.5, 3.5)], energy_j=2.0)
    assert s == PowerState(sm_mhz_min=1700.0, sm_mhz_median=1750.0, power_w_median=695.0, power_capped_share=1.0,
                           energy_j=2.0)


def test_pooled_timing_keeps_every_replay_and_sums_energy():
    import pytest
    pytest.importorskip("torch")
    from moegen.profiler import Timing, pooled
    m = GpuMonitor.__new__(GpuMonitor)
    m.samples = [(1.0, 1800.0, 690.0, 0), (5.0, 1500.0, 700.0, 0)]
    a = Timing(10.0, (9.0, 10.0, 11.0), PowerState(energy_j=1.0), ((0.0, 2.0),))
    b = Timing(20.0, (20.0, 21.0), PowerState(energy_j=0.5), ((4.0, 6.0),))
    p = pooled([a, b], m)
    assert p.times_us == (9.0, 10.0, 11.0, 20.0, 21.0) and p.us == 11.0
    assert p.spans == ((0.0, 2.0), (4.0, 6.0))
    assert p.power.energy_j == 1.5 and p.power.sm_mhz_min == 1500.0
    assert pooled([a, Timing(1.0, (1.0,), PowerState(), ((3.0, 3.5),))], None).power.energy_j is None


def test_a_timing_is_the_mean_over_routing_draws_of_each_draws_median():
    """Replays rotate through the input sets (routing draws), whose work may differ severalfold: the
    median of all replays would be one draw's time; the draws' mean is what serving pays."""
    import pytest
    pytest.importorskip("torch")
    from moegen.profiler import Timing, mean_of_draw_medians, pooled
    # three draws (0, 1 and 3 rows on this rank) in rotation, four rounds, one stray replay in draw 1
    times = (13.0, 30.0, 44.0, 13.0, 31.0, 44.0, 14.0, 90.0, 45.0, 13.0, 30.0, 44.0)
    assert mean_of_draw_medians(times, 3) == pytest.approx((13.0 + 30.5 + 44.0) / 3)
    assert mean_of_draw_medians(times, 1) == 30.5  # one set: the plain median
    with pytest.raises(ValueError, match="rotate evenly"):
        mean_of_draw_medians(times[:-1], 3)
    # windows of whole rounds keep the rotation when pooled
    w1 = Timing(0.0, times[:6], PowerState(), ((0.0, 1.0),), 3)
    w2 = Timing(0.0, times[6:], PowerState(), ((2.0, 3.0),), 3)
    assert pooled([w1, w2], None).us == mean_of_draw_medians(times, 3) and pooled([w1, w2], None).input_sets == 3
    with pytest.raises(ValueError, match="different numbers of input sets"):
        pooled([w1, Timing(0.0, (1.0,), PowerState(), ((4.0, 5.0),))], None)
