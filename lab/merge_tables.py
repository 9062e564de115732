"""Merge tables of one GPU and problem tuned over different buckets into one raw table, as one tune
over all of them would have written it (moegen.tune.merge_tables; `moegen tune` itself adds its
buckets to the user table it finds):  python3 lab/merge_tables.py OUT.json IN.json...  (oldest first)"""
import json
import sys
from functools import reduce

from moegen.tune import merge_tables

merged = reduce(merge_tables, [json.load(open(p)) for p in sys.argv[2:]])
json.dump(merged, open(sys.argv[1], "w"), indent=1)
print(sys.argv[1], [(b["tokens"], b["gemm1"][12:], b["gemm2"][12:], b["us"]) for b in merged["buckets"]])
