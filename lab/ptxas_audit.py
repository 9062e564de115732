"""ptxas's spills, stack frames and serialized wgmmas (C751x) of every kernel in the builds under the
given roots, from their manifests, with what the arch's config space expects of each serialization.
    python3 lab/ptxas_audit.py generated/_gputest generated
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from moegen.arch import serialization_note  # noqa: E402
from moegen.problem import gemm_shapes  # noqa: E402
from moegen.spec import model_from_dict  # noqa: E402

kernels = flagged = 0
for root in sys.argv[1:]:
    for manifest in sorted(Path(root).glob("*/sm90/manifest.json")):
        m = json.loads(manifest.read_text())
        shapes = gemm_shapes(model_from_dict(m["spec"]))
        for name, r in sorted(m["resources"].items()):
            if not name.startswith("moegen_"):
                continue
            kernels += 1
            notes = []
            if r["spill_bytes"] or r["stack_bytes"]:
                notes.append(f"{r['spill_bytes']} B spilled, {r['stack_bytes']} B stack")
            if r["wgmma_serialized"]:
                notes.append(f"wgmma serialized, {serialization_note(name, shapes)}")
            if notes:
                flagged += 1
                print(f"{manifest.parent.parent.name} {name}: {'; '.join(notes)}")
print(f"{kernels} kernels, {flagged} flagged")
