#!/usr/bin/env bash
# Round 2026-12-03 c (tenth session).  Built here, staged with `lab/stage_carry.sh generated/ring16`
# for M and R, `lab/stage_carry.sh generated/ring16/deepseek-v4-flash-w4a8 generated/_exp/tma8` for B8:
#   M: lab/experiments/run_tma_multicast.sh (token rows shared by TMA multicast, streaming only).
#   R <variant> <buckets>: the 16-deep ring that holds a whole K loop (GEMM2 m64 n8-n32 k128 s16:
#      launched early, it streams all its weights while GEMM1 runs).  generated/ring16/<variant>/sm90
#      holds DeepSeek-V4-Flash's shipped picks plus the s16 kernels; `moegen tune` over it at the
#      decode buckets, its table added to a copy of configs/dispatch; `moegen check` of the new picks;
#      `moegen bench` of the new picks against the same library with the shipped table, both orders.
#   B8: W4A8's GEMM2 loading its B rows by TMA boxes (lab/experiments/gemm2_b_operand_tma.patch, built
#      for DeepSeek-V4-Flash W4A8 in generated/_exp/tma8; BF16 was measured in round 2026-12-02 f):
#      `moegen check`, every kernel bit for bit against generated/ring16's W4A8 library (the shipped
#      picks), bench against it in both orders.
# Results in $OUT/results.tgz.     bash lab/round_20261203_c.sh OUT "M" "R deepseek-v4-flash 1,2,4,8,16,32,64" ...
set -uo pipefail
OUT=$1
R=/tmp/round_20261203_c; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R . ; }
[ -d $R/tables ] || cp -r configs/dispatch $R/tables
for part in "${@:2}"; do
  read -r what v buckets <<< "$part"
  if [ "$what" = M ]; then bash lab/experiments/run_tma_multicast.sh $R/tma > $R/tma.log 2>&1; cat $R/tma/tma_*.txt; pack; fi
  if [ "$what" = R ]; then
    act=(); m=$v; [ "${v%-w4a8}" != "$v" ] && { act=(--activations fp8); m=${v%-w4a8}; }
    rm -rf generated/ring16old && mkdir -p generated/ring16old && cp -r generated/ring16/$v generated/ring16old/
    timeout -k 5 200 python3 -m moegen tune --model $m "${act[@]}" --no-build --out generated/ring16 \
      --buckets $buckets --table-root $R/tables > $R/tune-$v.txt 2>&1
    echo "tune $v rc $?"; grep -E "T=|timings" $R/tune-$v.txt
    t=$(ls $R/tables/sm90/nvidia-h200-132sm/*.json | xargs grep -l "\"model\": \"$v\"" | head -1)
    mkdir -p generated/ring16/dispatch/sm90/nvidia-h200-132sm && cp $t generated/ring16/dispatch/sm90/nvidia-h200-132sm/
    pack
    timeout -k 5 150 python3 -m moegen check --model $m "${act[@]}" --out generated/ring16 \
      --tokens 0,1,2,3,5,9,33,64,700,4100 > $R/check-$v.txt 2>&1
    echo "check $v rc $?: $(tail -1 $R/check-$v.txt)"; grep -E "FAIL" $R/check-$v.txt | head -3
    timeout -k 5 150 python3 -m moegen bench --model $m "${act[@]}" --out generated/ring16 \
      --compare shipped=generated/ring16old/$v/sm90 --tokens $buckets --rounds 3 --json $R/bench-$v-a.json \
      > $R/bench-$v-a.txt 2>&1
    echo "bench $v a rc $?"; grep -v Warning $R/bench-$v-a.txt | tail -16 | cut -d'|' -f2-7,13
    timeout -k 5 150 python3 -m moegen bench --model $m "${act[@]}" --out generated/ring16old \
      --compare ring16=generated/ring16/$v/sm90 --tokens $buckets --rounds 3 --json $R/bench-$v-b.json \
      > $R/bench-$v-b.txt 2>&1
    echo "bench $v b rc $?"; grep -v Warning $R/bench-$v-b.txt | tail -16 | cut -d'|' -f2-7,13
    pack
  fi
  if [ "$what" = B8 ]; then
    X=generated/_exp/tma8/deepseek-v4-flash-w4a8/sm90; B=generated/ring16/deepseek-v4-flash-w4a8/sm90
    timeout -k 5 150 python3 -m moegen check --model deepseek-v4-flash --activations fp8 --out generated/_exp/tma8 \
      --tokens 0,1,7,33,300,2048,4100 > $R/check-tma8.txt 2>&1
    echo "check tma8 rc $?: $(tail -1 $R/check-tma8.txt)"
    timeout -k 5 200 python3 lab/bitwise_ab.py $B $X deepseek-v4-flash --activations fp8 --tokens 1,37,300,2048,4100 \
      > $R/bitwise-tma8.txt 2>&1
    echo "bitwise tma8 rc $?: $(grep -c ': equal' $R/bitwise-tma8.txt) equal"; grep -v ': equal' $R/bitwise-tma8.txt | tail -3
    pack
    for o in a b; do
      if [ $o = a ]; then D=generated/_exp/tma8; C=gather=$B; else D=generated/ring16; C=tma=$X; fi
      timeout -k 5 150 python3 -m moegen bench --model deepseek-v4-flash --activations fp8 --out $D --compare $C \
        --tokens 256,1024,4096,16384 --rounds 3 --json $R/bench-tma8-$o.json > $R/bench-tma8-$o.txt 2>&1
      echo "bench tma8 $o rc $?"; grep -v Warning $R/bench-tma8-$o.txt | tail -8 | cut -d'|' -f2-7,13
      pack
    done
  fi
done
