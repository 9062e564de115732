"""Print the SASS of the kernels whose mangled names contain all given substrings.

    cuobjdump --dump-sass lib.so | python3 tools/sass_extract.py TileShapeILi64ELi16 Swiglu
"""
import sys

keys, out, keep = sys.argv[1:], [], False
for line in sys.stdin:
    if "Function :" in line:
        keep = all(k in line for k in keys)
    if keep:
        out.append(line)
sys.stdout.writelines(out)
