#!/usr/bin/env bash
# The 2026-12-01 (third) session's bench check, after `source lab/device_env.sh`: one DeepSeek-V4-Flash
# library against itself (A/A), without and with the per-T settle replays.  Two builds of the same
# kernels had differed by up to 3.6 %, the first-listed faster by ~1 % on average.  $OUT/results.tgz.
set -uo pipefail
OUT=$1; R=/tmp/round_j; rm -rf $R; mkdir -p $R
LIB=generated/_finalize/deepseek-v4-flash/sm90
for settle in 0 0.2; do
  timeout 110 python3 -m moegen bench --model deepseek-v4-flash --out generated/_finalize --compare same=$LIB \
    --tokens 1,16,64,256,1024,4096 --reps 10 --settle-seconds $settle --json $R/aa-$settle.json > $R/aa-$settle.md 2> $R/aa-$settle.log
  echo "settle $settle rc $?"
  python3 - $R/aa-$settle.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
by = {}
for r in rows: by.setdefault(r["tokens"], {})[r["library"]] = r["median_us"]
print("  ".join(f"T={t}: {d['default']:.1f}/{d['same']:.1f}={d['default'] / d['same']:.3f}" for t, d in sorted(by.items())))
PY
done
tar czf "$OUT/results.tgz" -C $R .
