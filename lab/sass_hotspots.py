"""Instruction mix and hottest SASS lines of one kernel, from ncu's source page (device machine):

    ncu --clock-control none -k regex:grouped_gemm --launch-skip 2 --launch-count 1 \
        --section SourceCounters --page source --print-source sass --csv \
        python3 tools/profile_run.py deepseek-v4-flash 256 generated/deepseek-v4-flash/sm90 > src.csv
    python3 tools/sass_hotspots.py src.csv [MIN_EXECUTIONS]

Prints warp instructions executed per opcode (share of the kernel) with their stall samples, then
every line executed at least MIN_EXECUTIONS times (default: none), e.g. to see a K loop's body or
which barrier wait spins.
"""
import collections
import csv
import sys

lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
rows = list(csv.reader(lines[start:]))
header, data = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
src, executed = header.index("Source"), header.index("Instructions Executed")
stalls = header.index("Warp Stall Sampling (All Samples)")
count = lambda r, i: int(r[i] or 0)  # noqa: E731
total = sum(count(r, executed) for r in data)
print(f"{sys.argv[1]}: {total} warp instructions executed, {len(data)} SASS lines")
by_op, stall_by_op = collections.Counter(), collections.Counter()
for r in data:
    words = r[src].split()
    if words:
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        by_op[op] += count(r, executed)
        stall_by_op[op] += count(r, stalls)
for op, n in by_op.most_common(30):
    print(f"  {op:12s} {n:12d} {n / max(total, 1):6.1%}  stall samples {stall_by_op[op]}")
if len(sys.argv) > 2:
    for r in data:
        if count(r, executed) >= int(sys.argv[2]):
            print(f"{r[0]} {count(r, executed):10d} {count(r, stalls):6d}  {r[src]}")
