"""The kernels round s and t tune a variant over: the arch's shortlist, the variant's default (or
fallback) kernels and the one-slice k128 tiles (m64 n8 / n16, s4 / s6 / s8, both GEMMs, and GEMM2
m64n32k128s4), as a comma-separated list for `moegen build --kernels`.
  python lab/mid_kernels.py MODEL [bf16|fp8] [TP EP RANK]"""
import sys

from moegen.arch import get_arch
from moegen.cli import _spec
from moegen.kernel_sets import default_kernels

model, act = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "bf16")
tp, ep, rank = (int(a) for a in (sys.argv[3:6] if len(sys.argv) > 5 else (1, 1, 0)))
spec = _spec(model, tp, ep, rank, act)
policy = get_arch("sm90", spec.activations)
candidates = {c.name: c for c in policy.candidate_configs(spec)}
suffix = "_fp8" if act == "fp8" else ""
one_slice = [f"moegen_sm90_{g}_m64n{n}k128s{s}{suffix}" for g in ("gemm1", "gemm2") for n in (8, 16) for s in (4, 6, 8)]
one_slice.append(f"moegen_sm90_gemm2_m64n32k128s4{suffix}")
names = {c.name for c in policy.shortlist_configs(spec)} | {c.name for c in default_kernels(spec, "sm90")}
names |= {n for n in one_slice if n in candidates}
print(",".join(sorted(names)))
print(spec.variant, len(names), file=sys.stderr)
