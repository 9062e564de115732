"""Compact a raw tuned table (moegen tune --tolerance 0) into the shipped one: the same timings,
fewer kernels (moegen.tune.compact_table).   python3 lab/compact_table.py RAW.json ROOT [TOLERANCE]"""
import json
import sys
from pathlib import Path

from moegen.tune import compact_table, save_table

raw = json.loads(Path(sys.argv[1]).read_text())
table = compact_table(raw, float(sys.argv[3]) if len(sys.argv) > 3 else 0.01)
kernels = {b[g] for b in table["buckets"] for g in ("gemm1", "gemm2")}
print(save_table(Path(sys.argv[2]), table))
print(f"compacted to {len(kernels)} kernels", file=sys.stderr)
