"""One small and one large layer call, for `compute-sanitizer --tool memcheck` (tools/gpu_check.sh)."""
import sys

import torch

from moegen.cli import DEFAULT_OUT
from moegen.runtime import load
from moegen.spec import load_model
from moegen.testing import random_inputs, random_weights

model = sys.argv[1] if len(sys.argv) > 1 else "deepseek-v4-flash"
spec = load_model(model)
layer = load(DEFAULT_OUT / "_gputest" / spec.variant / "sm90", spec=spec)
w = random_weights(spec, "cuda", 1)
g1 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm1"]
g2 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm2"]
for T in (3, 32, 1024):  # one-block routing, its largest size, many-block routing + scatter
    x = random_inputs(spec, T, "cuda", T)
    for i in range(max(len(g1), len(g2))):  # every kernel of both GEMMs at least once
        layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(g1[i % len(g1)], g2[i % len(g2)]))
torch.cuda.synchronize()
print("sanitizer run done")
