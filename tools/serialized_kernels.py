"""Kernels whose ptxas log says wgmma.mma_async was serialized (C751x), one per line as
`build_dir kernel count`, for each build directory given (its manifest.json's `resources`, which
the build parses from each kernel's log; a log dir also holds logs of kernels no longer built).
--picked: only kernels a dispatch table of that build picks for some bucket."""
import json
import sys
from pathlib import Path

picked_only = "--picked" in sys.argv
for d in (Path(a) for a in sys.argv[1:] if a != "--picked"):
    try:
        resources = json.loads((d / "manifest.json").read_text()).get("resources", {})
    except (OSError, ValueError):
        continue
    picks = {b.get(g) for t in (d / "dispatch").glob("*.json")
             for b in json.loads(t.read_text()).get("buckets", []) for g in ("gemm1", "gemm2")}
    for kernel, res in sorted(resources.items()):
        if res.get("wgmma_serialized") and (kernel in picks or not picked_only):
            print(f"{d} {kernel} {res['wgmma_serialized']}")
