"""The fastest kernel pairs per token bucket from a dispatch table `moegen tune` wrote (every timing
is kept there), e.g. to see how close the runner-up configs are:

    python3 tools/tune_summary.py generated/deepseek-v4-flash/sm90/dispatch/nvidia-h200-132sm.json [TOP]
"""
import collections
import json
import math
import sys

table = json.loads(open(sys.argv[1]).read())
top = int(sys.argv[2]) if len(sys.argv) > 2 else 5
print(f"{table['gpu']} library {table['library_fingerprint'][:16]} created {table['created']}")
by_tokens = collections.defaultdict(list)
for m in table["measurements"]:
    by_tokens[m["tokens"]].append(m)
for tokens, ms in sorted(by_tokens.items()):
    failed = [m for m in ms if not math.isfinite(m["us"])]
    ok = sorted((m for m in ms if math.isfinite(m["us"])), key=lambda m: m["us"])
    print(f"T={tokens}: {len(ok)} timed, {len(failed)} failed")
    for m in ok[:top]:
        print(f"   {m['us']:10.1f} us  {m['gemm1']}  {m['gemm2']}")
    for m in failed[:3]:
        print(f"   failed: {m['gemm1']} {m['gemm2']}: {m['reason']}")
