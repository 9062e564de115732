"""Merge tables of one GPU and problem tuned over different buckets (a tune resumed for the buckets
it had not reached) into one raw table:  python3 lab/merge_tables.py OUT.json IN.json...

Each bucket's pair is derived again from the timings the tables keep, as moegen.tune.search picks
it (the gemm2 stage's best pair and the confirmation round, lowest median), so a compacted (shipped)
table merged with a fresh raw one gives the raw, tolerance-0 picks at every bucket."""
import json
import math
import statistics
import sys

tables = [json.load(open(p)) for p in sys.argv[2:]]
merged = dict(tables[0])
measurements = [m for t in tables for m in t["measurements"]]  # [tokens, gemm1, gemm2, us, MHz, W, stage, reason]
buckets = {}
for t in tables:
    buckets.update((b["tokens"], b) for b in t["buckets"])
for tokens, bucket in buckets.items():
    here = [m for m in measurements if m[0] == tokens and m[3] is not None]
    stage2 = [m for m in here if m[6] == "gemm2"]
    if not stage2:
        continue  # no timings kept for this bucket: it keeps its pick
    best = min(stage2, key=lambda m: m[3])
    times = {(best[1], best[2]): [best[3]]}
    for m in here:
        if m[6] == "confirm":
            times.setdefault((m[1], m[2]), []).append(m[3])
    us, (g1, g2) = min((statistics.median(ts), pair) for pair, ts in times.items() if all(map(math.isfinite, ts)))
    buckets[tokens] = dict(tokens=tokens, gemm1=g1, gemm2=g2, us=round(us, 2))
merged["buckets"] = [buckets[k] for k in sorted(buckets)]
merged["measurements"] = measurements
# Partial when the run that reached the largest bucket was itself cut short (buckets beyond it missing).
last = max(tables, key=lambda t: max(b["tokens"] for b in t["buckets"]))
merged["tuned_with"] = dict(tables[-1]["tuned_with"], partial=bool(last["tuned_with"].get("partial")),
                            tolerance=0.0, commits=sorted({t["tuned_with"]["commit"] for t in tables}),
                            resumed_over=len(tables))
json.dump(merged, open(sys.argv[1], "w"), indent=1)
print(sys.argv[1], [(b["tokens"], b["gemm1"][12:], b["gemm2"][12:], b["us"]) for b in merged["buckets"]])
