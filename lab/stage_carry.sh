#!/usr/bin/env bash
# This workplace's device runs: stage what the GPU machine lacks into .carry/ (git-ignored): the built
# libraries under generated/ (manifests, .so, user dispatch tables) and the object store (so builds
# there only link: objects compress ~13x), packed into one xz tarball (the carry limit is 64 MiB), the
# nvidia-cutlass wheel (the build's fingerprint hashes its headers), and the commit.  Build first;
# this packs what is there.
#   lab/stage_carry.sh [ROOT ...]     (default: every build directory under generated/)
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .carry && mkdir -p .carry/whl
roots=("$@"); [ ${#roots[@]} -gt 0 ] || roots=(generated)
find "${roots[@]}" \( -name manifest.json -o -name 'libmoegen-*.so' -o -path '*/dispatch/*.json' \
  -o -path '*/.objects/*' \) -type f ! -name '.*' -print0 | tar cf - --null -T - | xz -T2 -6 > .carry/generated.tar.xz
if ! ls .whl/nvidia_cutlass-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d .whl nvidia-cutlass==4.2.0.0
fi
cp .whl/nvidia_cutlass-*.whl .carry/whl/
git describe --always --dirty > .carry/commit.txt
du -sh .carry
