"""Two layer calls at one token count; profile the second with ncu (tools/gpu_check.sh does not).

    ncu --clock-control none -k regex:"grouped_gemm|route|schedule|scatter|finalize" --launch-skip 6 \
        --launch-count 6 python3 tools/profile_run.py deepseek-v4-flash 1
"""
import sys

import torch

from moegen.cli import DEFAULT_OUT
from moegen.runtime import load
from moegen.spec import load_model
from moegen.testing import random_inputs, random_weights

model, T = sys.argv[1], int(sys.argv[2])
spec = load_model(model)
layer = load(DEFAULT_OUT / "_gputest" / spec.variant / "sm90", spec=spec)
w = random_weights(spec, "cuda", 1)
x = random_inputs(spec, T, "cuda", 2)
for _ in range(2):
    layer(x.hidden, x.logits, w.prepared, x.score_bias)
torch.cuda.synchronize()
