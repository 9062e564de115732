"""Check kernels of a built library against the float64 reference (relative L2), for kernels the GPU
tests' libraries do not hold (e.g. a tuning candidate before it joins them).  Pairs each gemm1 whose
name contains SUBSTRING with the gemm2 of the same tile (else the library's first gemm2), skewed
routing at the largest T.  The library reads MOEGEN_GRID once per process: run it once per grid.
Device machine:

    MOEGEN_GRID=persistent python3 tools/check_kernels.py generated/deepseek-v4-flash/sm90 m128n32k64 [5,300,1024]
"""
import os
import sys
from pathlib import Path

from moegen.runtime import load
from moegen.testing import random_inputs, random_weights, reference_output, relative_l2

TOLERANCE = 1e-2
build_dir, pattern = Path(sys.argv[1]), sys.argv[2]
tokens = [int(t) for t in (sys.argv[3] if len(sys.argv) > 3 else "5,300,1024").split(",")]
layer = load(build_dir)  # the spec it was built for, from its manifest
spec = layer.spec
w = random_weights(spec, "cuda", 1)
names = [k.name for k in layer.kernels]
grid = os.environ.get("MOEGEN_GRID", "auto")
failed = checked = 0
for g1, name in enumerate(names):
    if "gemm1" not in name or pattern not in name:
        continue
    twin = name.replace("gemm1", "gemm2")
    g2 = names.index(twin) if twin in names else next(i for i, n in enumerate(names) if "gemm2" in n)
    checked += 1
    for T in tokens:
        x = random_inputs(spec, T, "cuda", 7 * T + g1, skew=T == max(tokens))
        res = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(g1, g2), poison=True)
        err = relative_l2(res.out, reference_output(spec, w, x, res.topk_ids))
        ok = err <= TOLERANCE
        failed += not ok
        print(f"{name} + {names[g2]} grid={grid} T={T}: rel L2 {err:.2e}{'' if ok else '  FAILED'}", flush=True)
if not checked:
    sys.exit(f"{build_dir}: no gemm1 kernel name contains {pattern!r} (kernels: {', '.join(names)})")
sys.exit(1 if failed else 0)
