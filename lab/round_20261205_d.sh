#!/usr/bin/env bash
# Round d (2026-12-05, the seventh session): the GPU test suite again (the batched num_tokens = 0 fix,
# 05601d4, and the files round c never reached), then, on whichever GPU came:
#   an H100: DeepSeek-V4-Flash's first H100 table (the runtime falls back to the H200's with a warning);
#   an H200: round a's leftovers (lab/round_20261205_a.sh).
# Libraries: generated/_gputest (lab/build_test_libs.py, MOEGEN_TEST_KERNELS=default) and
# generated/_exp/mid (lab/mid_kernels.py: shortlist + default + one-slice k128 tiles), staged with
#   bash lab/stage_carry.sh generated/_gputest generated/_exp/mid generated/.objects
#   TESTS          round c's TESTS (pytest -m gpu tests/, then the batched-against-experts look)
#   TUNE BUCKETS   tune DeepSeek-V4-Flash over the mid library at BUCKETS into /tmp/round_d/dispatch (this
#                  GPU's table only: no H200 table beside it), round s's tuner settings
#   BENCH TOKENS   that table against the H200 table the runtime falls back to, both orders; packs
#                  /tmp/round_d into $OUT/round_d.tgz (table, tune logs, bench JSONs)
# Each call within the device's idle release (30 s) of the one before, so /tmp/round_d persists.
# Ran (2026-12-05, an H100 80GB HBM3, at 7c6b414): TESTS (415 passed, 2 skipped), TUNE 1,2,4,8,16,32,64,128,
# TUNE 256,...,16384 and BENCH 1,4,16,64,256,1024,4096,16384, the same three with MODEL=gpt-oss-120b at c3460ca
# (docs/benchmarks.md, "DeepSeek-V4-Flash and gpt-oss-120b on an H100"), and compute-sanitizer memcheck of
# the batched tests (docs/benchmarks.md, "GPU tests and checks").
set -uo pipefail
D=${OUT:-/tmp}
R=/tmp/round_d; mkdir -p $R/dispatch
LIB=generated/_exp/mid
MODEL=${MODEL:-deepseek-v4-flash}
rc=0
case ${1:-TESTS} in
TESTS)
  bash lab/round_20261205_c.sh TESTS || rc=1 ;;
TUNE)
  source lab/device_env.sh || exit 1
  nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit,temperature.gpu,driver_version --format=csv,noheader
  timeout -k 5 ${TUNE_LIMIT:-280} python3 -m moegen tune --model $MODEL --no-build --out $LIB --buckets $2 \
    --table-root $R/dispatch --warm-seconds 0.5 --min-seconds 0.03 --reps 3 --rotations ${ROTATIONS:-2} \
    > $R/tune-$MODEL-$2.txt 2>&1 || rc=1
  echo "tune rc $rc"; grep -E "T=|timings" $R/tune-$MODEL-$2.txt | cut -c1-140
  tar czf $D/round_d.tgz -C /tmp round_d ;;
BENCH)
  source lab/device_env.sh || exit 1
  table=$(find $R/dispatch -name '*.json' | head -1)
  [ -n "$table" ] || { echo "no tuned table under $R/dispatch"; exit 1; }
  rm -rf $R/fallback && mkdir -p $R/fallback/$MODEL
  cp -r $LIB/$MODEL/sm90 $R/fallback/$MODEL/  # no user table: the runtime takes configs/dispatch's H200 table
  mkdir -p $LIB/dispatch && cp -r $R/dispatch/* $LIB/dispatch/
  for o in a b; do
    if [ $o = a ]; then DD=$LIB; C=h200-table=$R/fallback/$MODEL/sm90; else DD=$R/fallback; C=tuned=$LIB/$MODEL/sm90; fi
    timeout -k 5 ${BENCH_LIMIT:-250} python3 -m moegen bench --model $MODEL --out $DD --compare $C \
      --tokens $2 --rounds 4 --json $R/bench-$o.json > $R/bench-$o.txt 2>&1 || rc=1
    echo "bench $o rc $?"; grep -E " T=" $R/bench-$o.txt | cut -c1-150
  done
  tar czf $D/round_d.tgz -C /tmp round_d ;;
*) echo "unknown part $1"; exit 2 ;;
esac
exit $rc
