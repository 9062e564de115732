#!/usr/bin/env bash
# Stage what a device run needs and the device lacks into .carry/ (ignored): the built libraries
# (default model's full space and the GPU tests' variants) with their manifests, dispatch tables and
# logs, packed into one xz tarball (SASS compresses ~10x; the carry limit is 64 MiB), and the
# nvidia-cutlass wheel.  It first brings those builds up to date with this tree (cached objects make
# that a no-op or a layer rebuild), so the device never finds a stale fingerprint and recompiles.
# Then: device run with carry [".carry"], command `bash tools/gpu_check.sh $OUT`.
set -euo pipefail
cd "$(dirname "$0")/.."
# KERNELS=name,name,... stages a subset of the space (a quicker A/B; say so with its results).
python3 -m moegen build --model deepseek-v4-flash --arch sm90 --kernels "${KERNELS:-all}" -j 2 | tail -1
[ -n "${SKIP_TEST_LIBS:-}" ] || python3 tools/build_test_libs.py --sequential
rm -rf .carry && mkdir -p .carry/whl
find generated \( -name manifest.json -o -name 'libmoegen-*.so' -o -path '*/dispatch/*' -o -path '*/logs/*' \) \
  -print0 | tar cJf .carry/generated.tar.xz --null -T -
if ! ls .whl/nvidia_cutlass-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d .whl nvidia-cutlass==4.2.0.0
fi
cp .whl/nvidia_cutlass-*.whl .carry/whl/
git describe --always --dirty > .carry/commit.txt  # gpu_check.sh records it with the results
du -sh .carry
