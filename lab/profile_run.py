"""Two layer calls at one token count; profile the second with ncu (tools/gpu_check.sh does not).

    ncu --clock-control none -k regex:"grouped_gemm|route|scatter|finalize" --launch-skip 5 \
        --launch-count 5 python3 tools/profile_run.py deepseek-v4-flash 1 [build-dir]
The first argument is a build's variant (deepseek-v4-flash-w4a8: the W4A8 one); the build dir
defaults to the tests' build of it, pass generated/<variant>/sm90 for a tuned library.  The spec is
the library's.
"""
import os
import sys
from pathlib import Path

import torch

from moegen.cli import DEFAULT_OUT
from moegen.runtime import load
from moegen.testing import random_inputs, random_weights

variant, T = sys.argv[1], int(sys.argv[2])
layer = load(Path(sys.argv[3]) if len(sys.argv) > 3 else DEFAULT_OUT / "_gputest" / variant / "sm90")
spec = layer.spec
w = random_weights(spec, "cuda", 1, layout=layer.weight_layout)
x = random_inputs(spec, T, "cuda", 2)
# MOEGEN_PROFILE_KERNELS=gemm1_name,gemm2_name picks the kernels (under ncu NVML can fail, the
# driver version then differs from the dispatch table's and the layer falls back to its heuristic).
names = [n for n in os.environ.get("MOEGEN_PROFILE_KERNELS", "").split(",") if n]
all_names = [k.name for k in layer.kernels]
kernels = tuple(all_names.index(n) for n in names) if names else layer.choose_kernels(T)
print("kernels:", [layer.kernels[i].name for i in kernels])
for _ in range(2):
    layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=kernels)
torch.cuda.synchronize()
