"""Layer calls of one build for `compute-sanitizer` (tools/gpu_check.sh): every kernel of both GEMMs at
least once, one-block routing (T = 3 and 8; BF16 also 32), many-block routing (W4A8 from 9 tokens) and
the scatter kernel (T = 1024), and the experts-only entry point.

    compute-sanitizer --tool memcheck python3 tools/sanitize_run.py generated/deepseek-v4-flash/sm90
    compute-sanitizer --tool racecheck python3 tools/sanitize_run.py generated/deepseek-v4-flash/sm90 3

An optional comma-separated token list replaces the default 3,8,32,1024: racecheck tracks every
shared-memory access and did not finish the default list within 100 s on an H100 (2026-12-06).

PyTorch's caching allocator is off here: memcheck sees only the allocator's large segments, so an access
past a tensor's end inside its cached segment would go unreported.  (Under the sanitizer PyTorch's
allocated bytes also grew from 11 to 56 GiB over seven batched GPU tests that hold 3.2 GiB without it.)
Run pytest under the sanitizer with PYTORCH_NO_CUDA_MEMORY_CACHING=1 likewise.
"""
import os
import sys

os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")  # before torch allocates anything

import torch  # noqa: E402

from moegen.runtime import load  # noqa: E402
from moegen.testing import random_inputs, random_weights  # noqa: E402

USAGE = "usage: sanitize_run.py BUILD_DIR [TOKENS, e.g. 3,8,32,1024]"
if len(sys.argv) not in (2, 3):
    sys.exit(USAGE)
try:
    token_counts = [int(t) for t in sys.argv[2].split(",")] if len(sys.argv) == 3 else [3, 8, 32, 1024]
except ValueError:
    sys.exit(f"sanitize_run.py: TOKENS {sys.argv[2]!r} is not a comma-separated list of integers; {USAGE}")
layer = load(sys.argv[1])
spec = layer.spec
w = random_weights(spec, "cuda", 1, layer.weight_layout)
g1 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm1"]
g2 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm2"]
for T in token_counts:
    x = random_inputs(spec, T, "cuda", T)
    for i in range(max(len(g1), len(g2))):
        res = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(g1[i % len(g1)], g2[i % len(g2)]))
    layer.experts(x.hidden, res.topk_ids, res.topk_weights, w.prepared)
torch.cuda.synchronize()
print("sanitizer run done")
