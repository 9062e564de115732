"""Layer calls of one build for `compute-sanitizer` (tools/gpu_check.sh): every kernel of both GEMMs at
least once, one-block routing (T = 3 and 8; BF16 also 32), many-block routing (W4A8 from 9 tokens) and
the scatter kernel (T = 1024), and the experts-only entry point.

    compute-sanitizer --tool memcheck python3 tools/sanitize_run.py generated/deepseek-v4-flash/sm90
"""
import sys

import torch

from moegen.runtime import load
from moegen.testing import random_inputs, random_weights

layer = load(sys.argv[1])
spec = layer.spec
w = random_weights(spec, "cuda", 1, layer.weight_layout)
g1 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm1"]
g2 = [i for i, k in enumerate(layer.kernels) if k.gemm == "gemm2"]
for T in (3, 8, 32, 1024):
    x = random_inputs(spec, T, "cuda", T)
    for i in range(max(len(g1), len(g2))):
        res = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(g1[i % len(g1)], g2[i % len(g2)]))
    layer.experts(x.hidden, res.topk_ids, res.topk_weights, w.prepared)
torch.cuda.synchronize()
print("sanitizer run done")
