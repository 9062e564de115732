"""The benchmark's markdown table (CPU only): every row has the header's columns, in its order."""
from moegen.bench import BenchRow, markdown_table


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
