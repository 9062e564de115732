# Source on the device machine: puts the carried builds in place and the carried CUTLASS wheel on
# PYTHONPATH (the device has no network). `source tools/device_env.sh` from the repository root.
if [ -d .carry ]; then  # staged by tools/stage_carry.sh
  cp -r .carry/generated/. generated/ 2>/dev/null || true
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/moegen-site .carry/whl/*.whl || return 1
  export PYTHONPATH=$PWD:/tmp/moegen-site
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
