"""Write tests/data/sm90_wgmma_serialized.json from whole-space build manifests: per kernel (keyed
model/kernel) the CTAs per SM it was compiled for and whether ptxas serialized its wgmmas.
    python3 lab/serialization_record.py generated/deepseek-v4-flash/sm90 generated/gpt-oss-120b/sm90 ..."""
import json
import subprocess
import sys
from pathlib import Path

from moegen.arch import sm90
from moegen.artifact import read_manifest
from moegen.naming import parse_kernel_name

kernels = {}
for build in sys.argv[1:]:
    m = read_manifest(Path(build))
    for name, res in sorted(m.data["resources"].items()):
        if name.startswith("moegen_sm90_"):
            blocks = sm90.launch_resources(parse_kernel_name(name))["min_blocks_per_sm"]
            kernels[f"{m.data['variant']}/{name}"] = [blocks, bool(res["wgmma_serialized"])]
commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
out = Path(__file__).resolve().parents[1] / "tests" / "data" / "sm90_wgmma_serialized.json"
out.write_text(json.dumps({"measured_at": commit, "nvcc": "13.0", "kernels": kernels}, indent=1) + "\n")
print(f"{out}: {len(kernels)} kernels, {sum(v[1] for v in kernels.values())} serialized")
