#!/usr/bin/env bash
# Stage what a device run needs and the device lacks into .carry/ (ignored): built libraries with
# their manifests and dispatch tables (not the object caches), and the nvidia-cutlass wheel.
# Then: device run with carry [".carry"], command `bash tools/gpu_check.sh $OUT`.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .carry && mkdir -p .carry/whl
find generated -name manifest.json | while read -r m; do
  d=$(dirname "$m")
  mkdir -p ".carry/$d"
  cp "$m" "$d"/libmoegen-*.so ".carry/$d/"
  [ -d "$d/dispatch" ] && cp -r "$d/dispatch" ".carry/$d/"
  [ -d "$d/logs" ] && cp -r "$d/logs" ".carry/$d/"
done
if ! ls .whl/nvidia_cutlass-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d .whl nvidia-cutlass==4.2.0.0
fi
cp .whl/nvidia_cutlass-*.whl .carry/whl/
du -sh .carry
