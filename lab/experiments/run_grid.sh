# Device probe: the carried library's ring-depth tiles under each grid policy (timeline spans;
# H200 results: docs/benchmarks.md, 1f3e3ad's section). $1 = results dir.
set -uo pipefail
O=$1; mkdir -p $O
source tools/device_env.sh || exit 1
M=deepseek-v4-flash
for tile in m128n64k64s6 m128n64k64s8 m128n64k128s8 m128n64k128s4; do
  rm -rf /tmp/g_$tile; cp -r generated/$M/sm90 /tmp/g_$tile
  python3 -c "
import sys; sys.path.insert(0, 'tools'); import ablation
from pathlib import Path
ablation.write_table(Path('/tmp/g_$tile'), {t: ('$tile', '$tile') for t in (256, 1024, 4096)})"
  for grid in auto tiles persistent; do
    MOEGEN_GRID=$grid timeout 60 python3 tools/timeline.py $M 256,1024,4096 /tmp/g_$tile > $O/$tile.$grid.txt 2>&1
    echo "$tile $grid: $(grep -o 'T=[0-9]* \|span median [0-9.]*' $O/$tile.$grid.txt | tr '\n' ' ')"
  done
done
