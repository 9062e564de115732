#!/usr/bin/env bash
# The 2026-12-01 (second) session's last device run, after lab/round_20261201_c.sh on the same machine
# (its compacted tables are in /tmp/keep):
#  1. issue 17's before/after: the 53c1add library and HEAD's, both built for 53c1add's spec with its
#     six default kernels, timed by lab/ab_versions.py, A B A B;
#  2. the default DeepSeek-V4-Flash build (the new table's picks) from an empty object store with
#     16 cores (issue 15: <= 60 s);
#  3. the GPU test suite until SECONDS_TOTAL (default 300) have passed: pytest's summary says what ran.
set -uo pipefail
OUT=$1; R=/tmp/final_d; rm -rf $R; mkdir -p $R
t0=$(date +%s)
[ -d /tmp/keep/dispatch ] && cp /tmp/keep/dispatch/sm90/*/*.json configs/dispatch/sm90/nvidia-h200-132sm/
AB=.carry/ab
for run in a1 b1 a2 b2; do
  if [ ${run:0:1} = a ]; then pp=$AB/old53 lib=$AB/old_out/deepseek-v4-flash/sm90; else pp=$PWD lib=$AB/head_out/deepseek-v4-flash/sm90; fi
  same=; [ $run = a1 ] || same="--same-kernels $R/ab-a1.json"
  PYTHONPATH=$pp:/tmp/moegen-site timeout 60 python3 lab/ab_versions.py $lib $AB/dsv4-53c1add.yaml $R/ab-$run.json $same \
    > $R/ab-$run.log 2>&1 || echo "ab $run failed: $(tail -2 $R/ab-$run.log)"
  echo "== ab $run"; grep "T=" $R/ab-$run.log | awk '{print $1, $2}' | tr '\n' ' '; echo
done
tar czf $OUT/results.tgz -C $R .
rm -rf /tmp/fresh; s=$(date +%s)
timeout 100 python3 -m moegen build --model deepseek-v4-flash --arch sm90 --out /tmp/fresh -j16 > $R/default_build.log 2>&1
echo "default build from an empty object store: rc $? in $(( $(date +%s) - s )) s"; grep -E "translation|built" $R/default_build.log | tail -2
tar czf $OUT/results.tgz -C $R .
timeout -s INT $(( ${SECONDS_TOTAL:-300} - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_gpu_layer.py \
  tests/test_quantize_gpu.py -q -p no:cacheprovider > $R/pytest.log 2>&1; echo "pytest rc $?"
grep -E "seed|passed|failed|FAILED|Error|Interrupt" $R/pytest.log | tail -15
tar czf $OUT/results.tgz -C $R .
echo "round done in $(( $(date +%s) - t0 )) s"
