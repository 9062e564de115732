#!/usr/bin/env bash
# This workplace's device runs (after `source lab/device_env.sh`): tune, compact, build the default
# kernels from the carried object store, benchmark default against tuned in one run, test.
#   bash lab/device_round.sh OUT STEP...
# STEP: tune:MODEL:KERNELS[:SPLIT]   moegen tune --no-build --tolerance 0 (raw table in generated/dispatch),
#                                    compacted into configs/dispatch (lab/compact_table.py)
#       bench:MODEL[:SPLIT]          moegen build (default kernels) into generated/_default, then moegen bench
#                                    of it against the tuned build in generated/, one run
#       tests[:K]  sanitizer[:MODEL]  sass[:MODEL]
# SPLIT: moegen options with '+' for spaces (--tp+2, --ep-size+8+--ep-rank+0).  BUCKETS, BENCH_TOKENS,
# TUNE_OPTS (extra moegen tune options), STEP_SECONDS (each step's time limit, default 300) override.
set -uo pipefail
OUT=$1; shift
# The shipped tables' buckets unless told otherwise: moegen tune's own default is 15 buckets, which
# under STEP_SECONDS cut every tune of one 2026-12-01 run short at T = 128 or 512.
BUCKETS=${BUCKETS:-1,4,16,64,256,1024,4096,16384}
mkdir -p "$OUT"
R=/tmp/device_round  # packed into $OUT/results.tgz after every step: a run cut short still returns its steps
rm -rf "$R" && mkdir -p "$R"
status=0
M="timeout -k 5 ${STEP_SECONDS:-300} python3 -m moegen"  # the step's own process: no orphan outlives it
for step in "$@"; do
  IFS=: read -r what model kernels split <<< "$step"
  [ "$what" = bench ] && { split=$kernels; kernels=; }
  split=${split//+/ }
  tag=$(echo "$model$split" | tr -c 'a-z0-9\n-' '_')
  echo "== $step $(date +%T)"
  case $what in
    tune)
      $M tune --model "$model" $split --kernels "$kernels" --no-build --tolerance 0 ${BUCKETS:+--buckets $BUCKETS} ${TUNE_OPTS:-} \
        > "$R/tune-$tag.log" 2>&1 || status=1  # cut short, it keeps the buckets it finished
      grep -E "timings in|T=|Error" "$R/tune-$tag.log" | tail -17
      raw=$(ls -t generated/dispatch/sm90/*/*.json 2>/dev/null | head -1)
      [ -n "$raw" ] || continue
      cp "$raw" "$R/raw-$tag.json"
      shipped=$(python3 lab/compact_table.py "$raw" configs/dispatch 2>> "$R/tune-$tag.log") || { status=1; continue; }
      tail -1 "$R/tune-$tag.log"; cp "$shipped" "$R/shipped-$tag.json";;
    bench)
      $M build --model "$model" $split --arch sm90 --out generated/_default --objects generated/.objects \
        > "$R/build-$tag.log" 2>&1 || { status=1; tail -5 "$R/build-$tag.log"; continue; }
      variant=$(tail -1 "$R/build-$tag.log" | xargs dirname | xargs basename)
      $M bench --model "$model" $split --out generated/_default --compare "tuned=generated/$variant/sm90" \
        --tokens "${BENCH_TOKENS:-1,4,16,64,256,1024,4096,16384}" --reps 10 --json "$R/bench-$tag.json" \
        > "$R/bench-$tag.md" 2> "$R/bench-$tag.log" || status=1
      cat "$R/bench-$tag.md"; tail -2 "$R/bench-$tag.log";;
    tests)
      timeout -k 5 ${STEP_SECONDS:-300} python3 -m pytest -m gpu tests/test_gpu_layer.py -q -s ${model:+-k "$model"} \
        > "$R/pytest.log" 2>&1 || status=1
      grep -E "seed|passed|failed|FAILED|Error" "$R/pytest.log" | tail -12;;
    sanitizer)
      timeout -k 5 ${STEP_SECONDS:-300} compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_run.py \
        "generated/_default/${model:-deepseek-v4-flash}/sm90" > "$R/sanitizer.log" 2>&1 || status=1
      tail -2 "$R/sanitizer.log";;
    sass)
      $M sass --model "${model:-deepseek-v4-flash}" --out generated/_default > "$R/sass-$tag.txt" 2>&1 || status=1
      grep -E "FAILED|serialized|OK" "$R/sass-$tag.txt" | tail -8;;
  esac
  tar czf "$OUT/results.tgz" -C "$R" .
done
echo "device_round status $status"
