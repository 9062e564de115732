"""Summarize `cuobjdump --dump-sass` output per kernel: wgmma (HGMMA), local memory, instructions.

    cuobjdump --dump-sass lib.so | python3 tools/sass_audit.py
Exits 1 if a GEMM kernel has no HGMMA or any kernel touches local memory (LDL/STL spills).
"""
import re
import sys

kernels, name = {}, None
for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if m:
        name = m.group(1)
        kernels[name] = {"HGMMA": 0, "LDL": 0, "STL": 0, "instructions": 0}
        continue
    if name and re.search(r"/\*[0-9a-f]{4,}\*/", line):
        k = kernels[name]
        k["instructions"] += 1
        for op in ("HGMMA", "LDL", "STL"):
            if re.search(rf"\b{op}\b", line):
                k[op] += 1
bad = False
for n, k in sorted(kernels.items()):
    gemm = "grouped_gemm" in n
    flag = ""
    if gemm and k["HGMMA"] == 0:
        flag, bad = " <-- NO HGMMA", True
    if k["LDL"] or k["STL"]:
        flag, bad = flag + " <-- LOCAL MEMORY", True
    short = n if len(n) < 110 else n[:107] + "..."
    print(f"{short}: HGMMA {k['HGMMA']}, LDL {k['LDL']}, STL {k['STL']}, {k['instructions']} instructions{flag}")
sys.exit(1 if bad else 0)
