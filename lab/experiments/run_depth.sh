# Device probe: weight-only streaming (stream+notokens) and streaming with token rows (stream) at
# T = 1024 for tiles with different ring depths and weight bytes in flight per SM. $1 = results dir
# (H200 results: docs/benchmarks.md, 1f3e3ad's section).
set -uo pipefail
O=$1; mkdir -p $O
source tools/device_env.sh || exit 1
M=deepseek-v4-flash
TILES="m128n64k64s6 m128n64k64s4 m128n64k64s8 m128n64k128s4 m128n64k128s8 m256n64k64s6 m128n32k64s6 m256n128k64s6"
timeout 240 python3 - "$O" $TILES <<'PY'
import sys, subprocess, os
from pathlib import Path
sys.path.insert(0, "tools")
import ablation
out, tiles = Path(sys.argv[1]), sys.argv[2:]
names = sorted({f"moegen_sm90_gemm{i}_{t}" for t in tiles for i in (1, 2)})
variants = ["stream+notokens", "stream"]
from concurrent.futures import ThreadPoolExecutor
for v in variants:
    ablation.make_tree(Path("/tmp/abD") / v, ablation.variant_edits(v), None)
with ThreadPoolExecutor(2) as pool:
    list(pool.map(lambda v: ablation.build(Path("/tmp/abD") / v, names, 8, out / f"build_{v}.log"), variants))
for v in variants:
    bd = Path("/tmp/abD") / v / "generated" / ablation.MODEL / "sm90"
    for t in tiles:
        ablation.write_table(bd, {1024: (t, t)})
        r = subprocess.run([sys.executable, "tools/timeline.py", ablation.MODEL, "1024", str(bd)], capture_output=True, text=True)
        lines = [l for l in r.stdout.splitlines() if "span" in l or "gemm" in l]
        block = f"== {v} {t}\n" + "\n".join(lines[-3:]) + "\n"
        print(block, flush=True)
        with open(out / "summary.txt", "a") as f:  # the device tool returns only the output's tail
            f.write(block + r.stderr[-300:])
PY
