"""Write tests/data/sm90_wgmma_serialized.json from builds: per kernel (keyed model/kernel) the CTAs per
SM it was compiled for and whether ptxas serialized its wgmmas.  A build directory is read from its
manifest's resources; MODEL=LOG reads the `moegen build` log of a build done elsewhere (its
"[i/n] kernel: ... WGMMA SERIALIZED" lines), for a model name under configs/models.
    python3 lab/serialization_record.py [--add] generated/deepseek-v4-flash/sm90 qwen3-30b-a3b=build-qwen3.log ..."""
import json
import re
import subprocess
import sys
from pathlib import Path

from moegen.arch import sm90
from moegen.artifact import read_manifest
from moegen.naming import parse_kernel_name

kernels = {}


def record(model: str, name: str, serialized: bool) -> None:
    blocks = sm90.launch_resources(parse_kernel_name(name))["min_blocks_per_sm"]
    kernels[f"{model}/{name}"] = [blocks, serialized]


for arg in (a for a in sys.argv[1:] if a != "--add"):  # --add: merge into the existing record
    if "=" in arg:
        model, log = arg.split("=", 1)
        for line in Path(log).read_text().splitlines():
            m = re.match(r"\[\d+/\d+\] (moegen_sm90_\w+): .* registers", line)
            if m:
                record(model, m.group(1), "WGMMA SERIALIZED" in line)
        continue
    m = read_manifest(Path(arg))
    for name, res in sorted(m.data["resources"].items()):
        if name.startswith("moegen_sm90_"):
            record(m.data["variant"], name, bool(res["wgmma_serialized"]))
commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
out = Path(__file__).resolve().parents[1] / "tests" / "data" / "sm90_wgmma_serialized.json"
old = json.loads(out.read_text())["kernels"] if "--add" in sys.argv[1:] else {}
out.write_text(json.dumps({"measured_at": commit, "nvcc": "13.0", "kernels": {**old, **kernels}}, indent=1) + "\n")
print(f"{out}: {len(kernels)} kernels, {sum(v[1] for v in kernels.values())} serialized")
