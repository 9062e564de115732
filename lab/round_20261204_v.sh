#!/usr/bin/env bash
# Round v (staged 2026-12-04 for the next session): what round u left unverified.
#   G   the W4A8 batch invariance on every W4A8 variant (round u ran it on four) and the timing tests
#       (tests/test_gpu_timing.py: the draws' mean, 6dd15d7; no GPU run yet)
#   R   the two buckets that ship the heuristic's pair (DeepSeek-V3 --ep-size 8 W4A8 T = 1, DeepSeek-V4-Flash
#       --ep-size 8 W4A8 T = 16) against the tuner's
#       picks, re-measured with the draws' mean, both orders
#   then round t's parts (BF16 --ep-size 8 of both DeepSeek models between the x4 buckets), e.g.
#     ROTATIONS=8 TOKENS=2,3,6,8,32,128 ... "T deepseek-v4-flash bf16 --ep-size 8 --ep-rank 0"
# Libraries built here (generated/_gputest, generated/_exp/mid: the --ep-size 8 W4A8 and BF16 tuning
# libraries, DeepSeek-V3 W4A8's): bash lab/stage_carry.sh generated/_gputest generated/_exp/mid
#   (the object store rides along, so the timing test's qwen3-30b-a3b-ep1of4 build links there; after
#   `ln -sfn _exp/mid/.objects generated/.objects`, which G does).
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
R=/tmp/round_v; mkdir -p $R
LIB=generated/_exp/mid
rc=0
for part in "$@"; do
  case $part in
  G)
    ln -sfn _exp/mid/.objects generated/.objects
    (timeout -k 5 200 python3 -m pytest -m gpu tests/test_gpu_w4a8.py -q -p no:cacheprovider -k batch_invariance 2>&1) > $D/GV8.txt || rc=1
    (MOEGEN_TEST_KERNELS=default timeout -k 5 120 python3 -m pytest -m gpu tests/test_gpu_timing.py -q -p no:cacheprovider 2>&1) > $D/GVT.txt || rc=1
    tail -1 $D/GV8.txt $D/GVT.txt ;;
  R)
    for spec in "deepseek-v3 1 moegen_sm90_gemm1_m64n16k128s6_fp8 moegen_sm90_gemm2_m64n16k128s4_fp8" \
                "deepseek-v4-flash 16 moegen_sm90_gemm1_m64n16k128s4_fp8 moegen_sm90_gemm2_m64n16k128s4_fp8"; do
      read -r model T g1 g2 <<< "$spec"
      variant=$model-ep0of8-w4a8
      python3 - $model $T $g1 $g2 $LIB <<'PY' || exit 1
import json, sys
from pathlib import Path
from moegen.cli import _spec
from moegen.problem import ProblemKey
model, T, g1, g2, lib = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
key = ProblemKey.of(_spec(model, 1, 8, 0, "fp8")).slug
src = Path("configs/dispatch/sm90/nvidia-h200-132sm") / f"{key}.json"
table = json.loads(src.read_text())
for b in table["buckets"]:
    if b["tokens"] == T:
        b.update(gemm1=g1, gemm2=g2, us=None)  # the tuner's pick, as a user table of the tuning library
dst = Path(lib) / "dispatch" / src.relative_to("configs/dispatch")
dst.parent.mkdir(parents=True, exist_ok=True)
dst.write_text(json.dumps(table, indent=1) + "\n")
PY
      rm -rf $R/shipped/$variant && mkdir -p $R/shipped/$variant && cp -r $LIB/$variant/sm90 $R/shipped/$variant/
      for o in a b; do  # order a: the tuner's pick as `default` against the shipped table as `shipped`
        if [ $o = a ]; then DD=$LIB; C=shipped=$R/shipped/$variant/sm90; else DD=$R/shipped; C=retuned=$LIB/$variant/sm90; fi
        timeout -k 5 100 python3 -m moegen bench --model $model --activations fp8 --ep-size 8 --ep-rank 0 --out $DD \
          --compare $C --tokens 1,16 --rounds 4 --json $R/bench-$variant-$o.json > $R/bench-$variant-$o.txt 2>&1 || rc=1
        grep -E " T=" $R/bench-$variant-$o.txt | cut -c1-150
      done
      python3 lab/bench_verdict.py $R/bench-$variant-{a,b}.json
      rm -f $LIB/dispatch/sm90/nvidia-h200-132sm/*.json
    done ;;
  *) echo "unknown part $part"; rc=1 ;;
  esac
done
tar czf $D/round_v.tgz -C $R . 2>/dev/null
exit $rc
