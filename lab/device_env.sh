# Source on the device machine: puts the carried builds in place and the carried CUTLASS wheel on
# PYTHONPATH (the device has no network). `source tools/device_env.sh` from the repository root.
# Sourcing it again (e.g. before tools/ab_bench.sh) does not unpack the same tarball twice: that
# would put the carried dispatch tables back over the ones `moegen tune` just wrote.
if [ -d .carry ]; then  # staged by tools/stage_carry.sh
  if [ -f .carry/generated.tar.xz ]; then
    carried=$(sha256sum .carry/generated.tar.xz | cut -d' ' -f1)
    if [ "$(cat generated/.carried_sha256 2>/dev/null)" != "$carried" ]; then
      python3 -c "import tarfile; tarfile.open('.carry/generated.tar.xz').extractall('.', filter='data')" || return 1
      echo "$carried" > generated/.carried_sha256
    fi
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/moegen-site .carry/whl/*.whl || return 1
  export PYTHONPATH=$PWD:/tmp/moegen-site
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
# The commit staged with the carry (the device copy's git metadata can lag behind the tree): the
# benchmark records it.
export MOEGEN_COMMIT=${MOEGEN_COMMIT:-$(cat .carry/commit.txt 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)}
