"""Build, here, the libraries tests/test_distributed_gpu.py and tools/bench_distributed.py load on the
2-GPU machine: Qwen3-30B-A3B whole, its EP 2 ranks and its TP 2 rank, with the kernels `moegen build`
gives each, under the GPU tests' folder (generated/_gputest) and object store.
    python3 lab/build_distributed_libs.py    (then: bash lab/stage_carry.sh generated/_gputest)"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from gpu_variants import OUT, STORE  # noqa: E402
from moegen.build import build  # noqa: E402
from moegen.kernel_sets import default_kernels  # noqa: E402
from moegen.spec import load_model  # noqa: E402

full = load_model("qwen3-30b-a3b")
for spec in [full, full.with_parallel(ep_size=2, ep_rank=0), full.with_parallel(ep_size=2, ep_rank=1),
             full.with_parallel(tp_size=2)]:
    build(spec, "sm90", default_kernels(spec, "sm90"), OUT, store=STORE, log=print)
