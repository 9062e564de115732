# This workplace's device runs: `source lab/device_env.sh` from the repository root on the GPU machine.
# Unpacks the carried builds (once per tarball) and the CUTLASS wheel, sets PYTHONPATH and MOEGEN_COMMIT.
if [ -f .carry/generated.tar.xz ]; then
  carried=$(sha256sum .carry/generated.tar.xz | cut -d' ' -f1)
  if [ "$(cat generated/.carried_sha256 2>/dev/null)" != "$carried" ]; then
    python3 -c "import tarfile; tarfile.open('.carry/generated.tar.xz').extractall('.', filter='data')" || return 1
    echo "$carried" > generated/.carried_sha256
  fi
fi
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/moegen-site .carry/whl/*.whl || return 1
export PYTHONPATH=$PWD:/tmp/moegen-site PYTHONUNBUFFERED=1
export MOEGEN_COMMIT=${MOEGEN_COMMIT:-$(cat .carry/commit.txt 2>/dev/null)}
