#!/usr/bin/env bash
# Round a (2026-12-06): the first GPU run of 500bac2, 16fe66c and 37d3b80 (routing's underflow and
# signed-zero handling, the C ABI's pointer checks).  Any SM90 GPU: it checks, it does not time.
# Carry only the CUTLASS wheel:
#   rm -rf .carry && mkdir -p .carry/whl && cp .whl/nvidia_cutlass-*.whl .carry/whl/ && git rev-parse --short HEAD > .carry/commit.txt
#   NEW     the two new routing tests (builds the libraries they need)
#   SUITE   the whole GPU suite; a first call on a fresh machine mostly compiles, call it again: each
#           call skips the tests an earlier call on the machine passed (lab/pytest_resume.py);
#           FILES="tests/a.py tests/b.py" narrows it to those files
#   TARGET  when the whole suite does not fit: the layer tests of both DeepSeek models (BF16, their EP
#           ranks, the W4A8 build of V4-Flash), Qwen3's EP rank, and every test that is not per variant
#   AB      4077982's quantizer trigger against the one before it (carry it as
#           .carry/quantize_before.cuh: git show 4077982~1:templates/include/moegen/quantize.cuh),
#           DeepSeek-V4-Flash W4A8 at T = 1-8 where the quantizer follows GEMM1, both bench orders
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export MOEGEN_TEST_KERNELS=default
# -q hides pytest's header and a timeout kills the summary, the two places the seed is printed
export MOEGEN_TEST_SEED=${MOEGEN_TEST_SEED:-$(( (RANDOM << 15 | RANDOM) ))}
echo "MOEGEN_TEST_SEED=$MOEGEN_TEST_SEED"
rc=0
case $1 in
NEW)
  (timeout -k 5 ${LIMIT:-300} python3 -m pytest -m gpu tests/test_gpu_layer.py -q -p no:cacheprovider \
    -k "underflow or signed_zero" 2>&1) > $D/tests-new.txt || rc=1
  grep -E "seed|passed|failed|error" $D/tests-new.txt | tail -6 ;;
SUITE)
  # keyed by the sources' bytes: a call with other code starts over
  P=/tmp/suite-passed-$(find moegen templates tests configs -type f ! -path '*/__pycache__/*' | sort | xargs cat | sha256sum | cut -c1-16).txt
  (PYTHONPATH=$PYTHONPATH:$PWD/lab MOEGEN_RESUME_FILE=$P timeout -k 5 ${LIMIT:-560} \
    python3 -m pytest -m gpu ${FILES:-tests/} -q -p no:cacheprovider -p pytest_resume 2>&1) > $D/tests-suite.txt || rc=1
  cp $P $D/suite-passed.txt 2>/dev/null
  echo "passed on this machine with these sources so far: $(sort -u $P 2>/dev/null | wc -l)"
  grep -E "seed|passed|failed|error|FAILED" $D/tests-suite.txt | tail -12 ;;
TARGET)
  (timeout -k 5 ${LIMIT:-560} python3 -m pytest -m gpu tests/test_gpu_layer.py tests/test_gpu_w4a8.py -q -p no:cacheprovider \
    -k "deepseek or qwen3-30b-a3b-ep1of4 or signed_zero or cuda_graph or hash_routed or input_checks or entry_points or batched or expert_map or dispatch_without or refuse" \
    2>&1) > $D/tests-target.txt || rc=1
  grep -E "seed|passed|failed|error|FAILED" $D/tests-target.txt | tail -12 ;;
AB)
  V=deepseek-v4-flash-w4a8; M="--model deepseek-v4-flash --activations fp8"
  rm -rf /tmp/before && mkdir -p /tmp/before && cp -r moegen templates configs pyproject.toml /tmp/before/
  cp .carry/quantize_before.cuh /tmp/before/templates/include/moegen/quantize.cuh
  python3 -m moegen build $M --arch sm90 --out /tmp/ab/after -j 16 > $D/build-after.txt 2>&1 || { rc=1; tail -3 $D/build-after.txt; }
  (cd /tmp/before && PYTHONPATH=/tmp/before:/tmp/moegen-site python3 -m moegen build $M --arch sm90 --out /tmp/ab/before -j 16) \
    > $D/build-before.txt 2>&1 || { rc=1; tail -3 $D/build-before.txt; }
  for o in a b; do
    if [ $o = a ]; then DD=/tmp/ab/after; C=before=/tmp/ab/before/$V/sm90; else DD=/tmp/ab/before; C=after=/tmp/ab/after/$V/sm90; fi
    timeout -k 5 150 python3 -m moegen bench $M --out $DD --compare $C --tokens 1,2,4,8 --rounds 6 \
      --json $D/ab-$o.json > $D/ab-$o.txt 2>&1 || rc=1
    echo "bench $o"; grep -E " T=" $D/ab-$o.txt | cut -c1-150
  done ;;
esac
exit $rc
