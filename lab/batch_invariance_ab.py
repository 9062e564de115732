"""Batch invariance of a build with its own dispatch table (ROOT/dispatch, e.g. a tuned table cut to the
buckets the library has): eight tokens alone against the same tokens inside batches of every bucket
edge and the size just past it (tests/gpu_variants.assert_batch_invariant), on fresh random weights.
For libraries the GPU tests do not build (a candidate library carried to the GPU machine).

  python3 lab/batch_invariance_ab.py ROOT MODEL [--tp N] [--sizes 1,2,...]      (GPU machine; prints its seed)
"""
import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gpu_variants import assert_batch_invariant  # noqa: E402
from moegen.runtime import load  # noqa: E402
from moegen.spec import load_model  # noqa: E402
from moegen.testing import random_weights  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("model")
ap.add_argument("--tp", type=int, default=1)
ap.add_argument("--sizes", default=None, help="batch sizes (default: every bucket edge and one past it, up to 4096)")
a = ap.parse_args()
seed = random.randrange(1 << 30)
print(f"seed {seed}")
spec = load_model(a.model)
spec = spec.with_parallel(tp_size=a.tp) if a.tp > 1 else spec
layer = load(Path(a.root) / spec.variant / "sm90", spec=spec, dispatch_root=Path(a.root) / "dispatch")
assert layer.dispatch is not None, "no dispatch table for this build under ROOT/dispatch"
w = random_weights(spec, "cuda", seed, layer.weight_layout)
edges = [t for t in layer.dispatch.tokens if t <= 4096]
sizes = ([int(s) for s in a.sizes.split(",")] if a.sizes else
         sorted({8, 64, 512, *edges, *(t + 1 for t in edges)}))
assert_batch_invariant(layer, w, sizes, seed + 31)
print(f"{a.model}: batch-invariant over T = {sizes} ({[layer.choose_kernels(t) for t in edges]})")
