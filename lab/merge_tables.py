"""Merge raw tables of one GPU and problem tuned over different buckets (a tune resumed for the
buckets it had not reached) into one raw table:  python3 lab/merge_tables.py OUT.json IN.json..."""
import json
import sys

tables = [json.load(open(p)) for p in sys.argv[2:]]
merged = dict(tables[0])
buckets = {}
for t in tables:
    buckets.update((b["tokens"], b) for b in t["buckets"])
merged["buckets"] = [buckets[k] for k in sorted(buckets)]
merged["measurements"] = [m for t in tables for m in t["measurements"]]
# Partial when the run that reached the largest bucket was itself cut short (buckets beyond it missing).
last = max(tables, key=lambda t: max(b["tokens"] for b in t["buckets"]))
merged["tuned_with"] = dict(tables[-1]["tuned_with"], partial=bool(last["tuned_with"].get("partial")),
                            resumed_over=len(tables))
json.dump(merged, open(sys.argv[1], "w"), indent=1)
print(sys.argv[1], [b["tokens"] for b in merged["buckets"]])
