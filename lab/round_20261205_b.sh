#!/usr/bin/env bash
# Round b (2026-12-05): the first GPU run of the models `moegen spec --from-config` reads without a shipped
# spec (tests/data/hf_configs/unshipped: GLM-4.6, GLM-4.5-Air, Kimi-K2-Instruct, MiniMax-M2; DeepSeek-V3.2 is
# DeepSeek-V3's layer and runs its table).  Each spec is written from its published config.json, built
# with its default kernels (the fallback set: no table), SASS-audited and checked against the float64
# reference at odd T, T = 0 and beyond the one-block routing, then at --ep-size 8 (Kimi-K2: 48 local experts).
# Libraries: built here first and staged (`bash lab/stage_carry.sh generated/_new generated/.objects`,
# carry [".carry"]) so the device only links; without them it compiles (16 cores, about 2 minutes).
#   SPECS [MODEL ...]  the specs above (default all three; one device call per model keeps each under the
#            10-minute limit: builds on 16 cores, then checks of at most 150 s each)
#   BATCHED  the batched entry point's first GPU run: tests/test_gpu_layer.py -k batched on the default
#            kernels (MOEGEN_TEST_KERNELS=default: the shortlist would build ~90 kernels first) and the W4A8
#            library's refusal (tests/test_gpu_w4a8.py -k batched); `moegen check` covers it on any build.
#            BATCHED_K: another -k expression (e.g. "batched and not qwen3": its libraries not staged)
#   bash lab/round_20261205_b.sh PART     results in $OUT (one file per spec and split, tests-batched.txt)
# Ran (2026-12-05, an H100, through lab/round_20261205_c.sh): SPECS of all four models, whole and ep 8,
# all passed (docs/benchmarks.md "GPU tests and checks"); BATCHED's tests ran inside round c's TESTS.
set -uo pipefail
source lab/device_env.sh || exit 1
D=${OUT:-/tmp}
rc=0
part=${1:-SPECS}
if [ "$part" = BATCHED ]; then
  (MOEGEN_TEST_KERNELS=default timeout -k 5 ${BATCHED_LIMIT:-560} python3 -m pytest -m gpu tests/test_gpu_layer.py tests/test_gpu_w4a8.py \
    -q -p no:cacheprovider -k "${BATCHED_K:-batched}" 2>&1) > $D/tests-batched.txt || rc=1
  grep -E "seed|passed|failed|error" $D/tests-batched.txt | tail -3
  exit $rc
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $D/gpu.txt
models=("${@:2}"); [ ${#models[@]} -gt 0 ] || models=(kimi-k2-instruct glm-4.5-air glm-4.6 minimax-m2)
for model in "${models[@]}"; do
  python3 -m moegen spec --from-config tests/data/hf_configs/unshipped/$model.json -o /tmp/$model.yaml || { rc=1; continue; }
  for split in "" "--ep-size 8 --ep-rank 0"; do
    tag=$model${split:+-ep8}
    { python3 -m moegen build --model /tmp/$model.yaml $split --arch sm90 --out generated/_new \
        --objects generated/.objects -j 16 \
      && python3 -m moegen sass --model /tmp/$model.yaml $split --arch sm90 --out generated/_new | tail -1 \
      && timeout -k 5 ${CHECK_LIMIT:-150} python3 -m moegen check --model /tmp/$model.yaml $split --out generated/_new \
        --tokens ${CHECK_TOKENS:-0,1,7,33,300,2048}; } > $D/$tag.txt 2>&1 || rc=1
    echo "== $tag"; tail -3 $D/$tag.txt
  done
done
exit $rc
