"""The benchmark's markdown table and clock sampling (CPU only): every row has the header's columns,
in its order; nvidia-smi samples are parsed and matched to the replays' time windows."""
import os
import time
from datetime import datetime

from moegen.bench import BenchRow, ClockSampler, clock_summary, markdown_table, parse_clock_sample


def test_markdown_table_rows_match_the_header():
    rows = [BenchRow(tokens=t, kernels="moegen_sm90_gemm1_m64n8k128s6,moegen_sm90_gemm2_m64n8k128s6",
                     median_us=10.0 * t, p10_us=9.0 * t, p90_us=12.5 * t, weight_bytes=1e6, flops=2e9,
                     floor_us=5.0 * t, time_over_floor=2.0, achieved_tbs=1.5, achieved_tflops=3.25)
            for t in (1, 4096)]
    lines = markdown_table(rows).splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert len(lines) == 2 + len(rows)
    assert all(line.count("|") == lines[0].count("|") for line in lines[1:])
    cells = dict(zip(header, (c.strip() for c in lines[3].strip("|").split("|"))))
    assert cells["T"] == "4096"
    assert cells["moegen µs (median)"] == "40960.0"
    assert cells["p10-p90 µs"] == "36864.0-51200.0"
    assert cells["floor µs"] == "20480.0"
    assert cells["time / floor"] == "2.00"
    assert cells["kernels"] == rows[1].kernels


def test_clock_column_shows_min_median_and_power_cap_share():
    row = BenchRow(tokens=4096, kernels="k1,k2", median_us=1.0, p10_us=1.0, p90_us=1.0, weight_bytes=1.0, flops=1.0,
                   floor_us=1.0, time_over_floor=1.0, achieved_tbs=1.0, achieved_tflops=1.0,
                   **clock_summary([(1980.0, 0x0), (1515.0, 0x4), (1875.0, 0x4), (1980.0, 0x1)]))
    lines = markdown_table([row]).splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = dict(zip(header, (c.strip() for c in lines[2].strip("|").split("|"))))
    assert cells["SM MHz"] == "1515-1928 (50 % capped)"
    assert clock_summary([]) == dict(sm_mhz_min=None, sm_mhz_median=None, power_capped_share=None)


def test_parse_clock_sample():
    t, mhz, reasons = parse_clock_sample("2026/11/29 22:44:36.123, 1980, 0x0000000000000004\n")
    assert (mhz, reasons) == (1980.0, 4)
    assert t == datetime(2026, 11, 29, 22, 44, 36, 123000).timestamp()
    for bad in ("", "2026/11/29 22:44:36.123, [N/A], 0x0", "1980, 0x4", "timestamp, clocks.current.sm [MHz], x"):
        assert parse_clock_sample(bad) is None


def _fake_nvidia_smi(directory, body):
    exe = directory / "nvidia-smi"
    exe.write_text("#!/bin/bash\n" + body)
    exe.chmod(0o755)


def test_clock_sampler_matches_samples_to_windows(tmp_path, monkeypatch):
    """A stand-in nvidia-smi that prints a sample every 10 ms until SIGINT, as `nvidia-smi -lms` does."""
    _fake_nvidia_smi(tmp_path, "trap 'exit 0' INT\n"
                     "while true; do echo \"$(date '+%Y/%m/%d %H:%M:%S.%3N'), 1755, 0x0000000000000004\"; sleep 0.01; done\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sampler = ClockSampler(interval_ms=10)
    time.sleep(0.3)
    t0 = time.time()
    time.sleep(0.3)
    t1 = time.time()
    time.sleep(0.2)
    sampler.close()
    inside = sampler.window(t0, t1)
    assert 5 <= len(inside) < len(sampler.samples)
    assert clock_summary(inside) == dict(sm_mhz_min=1755.0, sm_mhz_median=1755.0, power_capped_share=1.0)


def test_clock_sampler_without_nvidia_smi_has_no_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    sampler = ClockSampler()
    sampler.close()
    assert sampler.window(0.0, time.time()) == []
    _fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed'; exit 9\n")  # present but failing
    sampler = ClockSampler()
    sampler.close()
    assert sampler.window(0.0, time.time()) == []
