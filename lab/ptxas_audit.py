"""ptxas's report (moegen.sass.ptxas_findings: spills, stack frames, serialized wgmmas and whether the
config space expects them) for every build under the given roots, without cuobjdump.
    python3 lab/ptxas_audit.py generated/_gputest generated
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from moegen.artifact import read_manifest  # noqa: E402
from moegen.sass import ptxas_findings  # noqa: E402

builds = failing = 0
for root in sys.argv[1:]:
    for manifest in sorted(Path(root).glob("*/sm90/manifest.json")):
        builds += 1
        for line, fails in ptxas_findings(read_manifest(manifest.parent)):
            failing += fails
            print(f"{manifest.parent.parent.name}: {line}{'  <-- FAILS' if fails else ''}")
print(f"{builds} builds, {failing} failing findings")
