#!/usr/bin/env bash
# Round 2026-12-03 b (ninth session): W4A8's full-width tile loop (the config's tile_loop, kernels
# named ..._loop_fp8), tuned and benched.  Built here (lab/stage_carry.sh generated/cand generated/<m>):
# generated/cand/<m>-w4a8/sm90 holds each model's shipped W4A8 picks plus the m128n128k128 s4/s8 loop
# kernels its K allows; generated/deepseek-v4-flash/sm90 is the W4A16 default build.
#   T <model> <buckets>: `moegen tune` over that library at those buckets, its table added to a copy
#      of configs/dispatch ($R/tables: the contribution shipped after); `moegen check` with the new
#      picks; `moegen bench` of the new picks against the same library with the shipped table
#      (generated/candold), at the buckets.
#   TB <model> <buckets>: the same for W4A16, generated/cand/<m>/sm90 holding the BF16 picks plus the
#      m256n128k64 s4/s8 loop kernels (an experiment: the template's loop opened to BF16 K loops up to 64).
#   G: the W4A8 GPU tests (tests/test_gpu_w4a8.py) on libraries with the new tables' picks.
#   C <model>: `moegen check` of the W4A16 default build, rebuilt with the template's new parameter.
#   O <model> <tokens>: W4A8 against W4A16 in both orders, both libraries from generated/cand (the
#      W4A16 one built for TB: its shipped picks are the same code as without the experiment).
#   W <model> <tokens>: the tuned W4A8 library against the W4A16 default build (generated/<model>).
# Results in $OUT/results.tgz.     bash lab/round_20261203_b.sh OUT "T model buckets" ...
set -uo pipefail
OUT=$1
R=/tmp/round_20261203_b; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R . ; }
[ -d $R/tables ] || cp -r configs/dispatch $R/tables
for part in "${@:2}"; do
  read -r what m buckets <<< "$part"
  act=(--activations fp8); v=$m-w4a8
  if [ "$what" = TB ]; then act=(); v=$m; what=T; fi  # TB: the same for W4A16 (BF16 loop kernels)
  if [ "$what" = T ]; then
    mkdir -p generated/candold && rm -rf generated/candold/$v && cp -r generated/cand/$v generated/candold/
    timeout -k 5 280 python3 -m moegen tune --model $m "${act[@]}" --no-build --out generated/cand \
      --buckets $buckets --table-root $R/tables > $R/tune-$v.txt 2>&1
    echo "tune $v rc $?"; grep -E "T=|timings" $R/tune-$v.txt
    t=$(ls $R/tables/sm90/nvidia-h200-132sm/*.json | xargs grep -l "\"model\": \"$v\"" | head -1)
    mkdir -p generated/cand/dispatch/sm90/nvidia-h200-132sm && cp $t generated/cand/dispatch/sm90/nvidia-h200-132sm/
    pack
    timeout -k 5 150 python3 -m moegen check --model $m "${act[@]}" --out generated/cand \
      --tokens 0,5,700,$buckets,5000 > $R/check-$v.txt 2>&1
    echo "check $v rc $?: $(tail -1 $R/check-$v.txt)"; grep -E "FAIL|seed" $R/check-$v.txt | head -3
    timeout -k 5 200 python3 -m moegen bench --model $m "${act[@]}" --out generated/cand \
      --compare shipped=generated/candold/$v/sm90 --tokens $buckets --rounds 6 --json $R/bench-$v.json \
      > $R/bench-$v.txt 2>&1
    echo "bench $v rc $?"; grep -v Warning $R/bench-$v.txt | tail -12
    pack
  fi
  if [ "$what" = G ]; then  # G: the W4A8 GPU tests on the shipped tables' picks (generated/_gputest, built here)
    timeout -k 5 400 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -s -p no:cacheprovider > $R/pytest-w4a8.log 2>&1
    echo "pytest w4a8 rc $?"; grep -E "seed|passed|failed|FAILED|Error" $R/pytest-w4a8.log | tail -6
    pack
  fi
  if [ "$what" = C ]; then  # C <model>: `moegen check` of the W4A16 default build (generated/<model>)
    timeout -k 5 120 python3 -m moegen check --model $m --tokens 0,1,5,700,4100 > $R/check-w4a16-$m.txt 2>&1
    echo "check w4a16 $m rc $?: $(tail -1 $R/check-w4a16-$m.txt)"
    pack
  fi
  if [ "$what" = O ]; then  # O <model> <tokens>: W4A8 against W4A16, both from generated/cand, both orders
    timeout -k 5 200 python3 -m moegen bench --model $m --activations fp8 --out generated/cand \
      --compare w4a16=generated/cand/$m/sm90 --tokens $buckets --rounds 4 --json $R/bench-order1-$m.json \
      > $R/bench-order1-$m.txt 2>&1; echo "bench order 1 $m rc $?"
    timeout -k 5 200 python3 -m moegen bench --model $m --out generated/cand \
      --compare w4a8=generated/cand/$m-w4a8/sm90 --tokens $buckets --rounds 4 --json $R/bench-order2-$m.json \
      > $R/bench-order2-$m.txt 2>&1; echo "bench order 2 $m rc $?"
    grep -E "^ +[a-z0-9]+ T=" $R/bench-order1-$m.txt $R/bench-order2-$m.txt | cut -c1-120
    pack
  fi
  if [ "$what" = W ]; then  # W <model> <tokens>: the tuned W4A8 library against the W4A16 default build
    timeout -k 5 250 python3 -m moegen bench --model $m --activations fp8 --out generated/cand \
      --compare w4a16=generated/$m/sm90 --tokens $buckets --rounds 4 --json $R/bench-w4a16-$m.json \
      > $R/bench-w4a16-$m.txt 2>&1
    echo "bench w4a16 $m rc $?"; grep -v Warning $R/bench-w4a16-$m.txt | tail -12
    pack
  fi
done
