#!/usr/bin/env bash
# Same-machine A/B of two builds of the default model with the same kernel picks: B (a library built
# from another commit into B_ROOT/<variant>/sm90, same kernel names) gets A's dispatch table with
# its own fingerprint, then the benchmark runs A, B, A (machines of the pool differ by ~2-4 %, so
# only an A/B inside one run shows a change of a few per cent).  Device machine, after tuning A:
#   source tools/device_env.sh && bash tools/ab_bench.sh A_ROOT B_ROOT OUT_DIR [TOKENS]
set -uo pipefail
a_root=$1 b_root=$2 out=$3 tokens=${4:-1,4,16,64,256,1024,4096,16384}
cd "$(dirname "$0")/.."
mkdir -p "$out"
python3 - "$a_root" "$b_root" <<'EOF' || exit 1
import json, sys
from pathlib import Path
a, b = (Path(r) / "deepseek-v4-flash" / "sm90" for r in sys.argv[1:3])
tables = sorted((a / "dispatch").glob("*.json"))
if not tables:
    sys.exit(f"{a}/dispatch: no table (tune A first)")
for t in tables:
    table = json.loads(t.read_text())
    table["library_fingerprint"] = json.loads((b / "manifest.json").read_text())["fingerprint"]
    (b / "dispatch").mkdir(exist_ok=True)
    (b / "dispatch" / t.name).write_text(json.dumps(table, indent=1) + "\n")
    print(f"{t.name}: A's picks copied to {b}")
EOF
for run in a1:"$a_root" b:"$b_root" a2:"$a_root"; do
  python3 -m moegen bench --model deepseek-v4-flash --out "${run#*:}" --tokens "$tokens" \
    --json "$out/bench_${run%%:*}.json" > "$out/bench_${run%%:*}.log" 2>&1 || echo "bench ${run%%:*} failed"
done
python3 - "$out" <<'EOF'
import json, sys
runs = {r: {row["tokens"]: row["median_us"] for row in json.load(open(f"{sys.argv[1]}/bench_{r}.json"))["rows"]}
        for r in ("a1", "b", "a2")}
print("| T | A (run 1) | B | A (run 2) | B / mean(A) |")
print("|---|---|---|---|---|")
for t in runs["a1"]:
    mean_a = (runs["a1"][t] + runs["a2"][t]) / 2
    print(f"| {t} | {runs['a1'][t]:.1f} | {runs['b'][t]:.1f} | {runs['a2'][t]:.1f} | {runs['b'][t] / mean_a:.3f} |")
EOF
