# Source on the device machine: puts the carried builds in place and the carried CUTLASS wheel on
# PYTHONPATH (the device has no network). `source tools/device_env.sh` from the repository root.
if [ -d .carry ]; then  # staged by tools/stage_carry.sh
  [ -f .carry/generated.tar.xz ] && python3 -c "import tarfile; tarfile.open('.carry/generated.tar.xz').extractall('.', filter='data')"
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/moegen-site .carry/whl/*.whl || return 1
  export PYTHONPATH=$PWD:/tmp/moegen-site
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
