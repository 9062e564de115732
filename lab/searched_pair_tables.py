"""Candidate tables for the shipped buckets whose picks the compaction before 3ce5390 kept on their best
timing (docs/benchmarks.md, footnote 12): the shipped table with those buckets set to the pair search
picked (moegen.tune.searched_pairs, the median rule of today's compaction), written as the user table
of an output root, and the kernels a build there needs (the default kernels plus those pairs').

    python lab/searched_pair_tables.py MODEL ACT TP EP RANK TOKENS OUT_ROOT   -> prints the kernel list
"""
import sys
from pathlib import Path

from moegen.cli import _spec
from moegen.dispatch import SHIPPED_DIR, read_table, user_dir
from moegen.kernel_sets import default_kernels
from moegen.problem import ProblemKey
from moegen.tune import save_table, searched_pairs

model, act, tp, ep, rank, tokens, out_root = sys.argv[1:]
spec = _spec(model, int(tp), int(ep), int(rank), act)
table = read_table(SHIPPED_DIR / "sm90" / "nvidia-h200-132sm" / f"{ProblemKey.of(spec).slug}.json")
pairs = searched_pairs(table)
chosen = {int(t) for t in tokens.split(",")}
missing = chosen - set(pairs)
if missing:
    sys.exit(f"no bucket for T = {sorted(missing)} in the shipped table")
buckets = [dict(b, gemm1=pairs[b["tokens"]][0], gemm2=pairs[b["tokens"]][1], us=round(pairs[b["tokens"]][2], 2))
           if b["tokens"] in chosen else b for b in table["buckets"]]
for b in table["buckets"]:
    if b["tokens"] in chosen:
        g1, g2, us = pairs[b["tokens"]]
        print(f"T={b['tokens']}: shipped {b['gemm1']} + {b['gemm2']}, searched {g1} + {g2} ({us:.2f} us)", file=sys.stderr)
save_table(user_dir(Path(out_root)), dict(table, buckets=buckets))
print(",".join(sorted({k.name for k in default_kernels(spec, "sm90")} | {pairs[t][g] for t in chosen for g in (0, 1)})))
