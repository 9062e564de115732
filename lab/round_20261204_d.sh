#!/usr/bin/env bash
# Round d (2026-12-04): Qwen3-30B-A3B's W4A8 small-T buckets retuned with the per-expert following in
# place, as a user table (generated/_exp/tune/dispatch, seeded with the shipped one so that its other
# buckets stay), then benched three ways: the retuned table (a library of the shortlist plus the
# shipped picks), the shipped table (the GPU tests' library), W4A16 (generated/_exp/follow/new).
#   Q   the tune, its table to $OUT/qwen3-w4a8-retuned.json, then the bench in two orders.
#   G8  the W4A8 GPU tests (tests/test_gpu_w4a8.py), every variant, shipped tables.
set -uo pipefail
source lab/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,driver_version --format=csv
D=${OUT:-/tmp}
X=generated/_exp/follow
Y=generated/_exp/tune
M=qwen3-30b-a3b
for part in "$@"; do
case $part in
Q) (rm -rf $Y/dispatch && mkdir -p $Y/dispatch && cp -r configs/dispatch/sm90 $Y/dispatch/
    timeout -k 5 200 python3 -m moegen tune --model $M --activations fp8 --no-build --kernels shortlist \
      --buckets 1,2,4,8 --rotations 2 --reps 3 --min-seconds 0.03 --warm-seconds 0.5 --out $Y \
      --table-root $Y/dispatch 2>&1 | grep -v Warn | tail -8
    cp $Y/dispatch/sm90/nvidia-h200-132sm/e128-l128-k8-h2048-i768-fp8.json $D/qwen3-w4a8-retuned.json
    timeout -k 5 150 python3 -m moegen bench --model $M --activations fp8 --out $Y --compare shipped=generated/_gputest/$M-w4a8/sm90 \
      --compare w4a16=$X/new/$M/sm90 --tokens 1,2,4,8,16 --rounds 4 --json $D/q_1.json | grep " T="
    timeout -k 5 150 python3 -m moegen bench --model $M --out $X/new --compare shipped=generated/_gputest/$M-w4a8/sm90 \
      --compare retuned=$Y/$M-w4a8/sm90 --tokens 1,2,4,8,16 --rounds 4 --json $D/q_2.json | grep " T="
   ) > $D/Q.txt 2>&1; tail -40 $D/Q.txt ;;
G8) timeout -k 5 ${G8_LIMIT:-500} python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider > $D/G8.txt 2>&1
   grep -E "passed|failed|error|seed" $D/G8.txt | tail -8 ;;
*) echo "unknown part $part" ;;
esac
done
