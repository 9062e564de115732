#!/usr/bin/env bash
# Tune every shipped model and split on this GPU and write the tables where moegen ships them
# (configs/dispatch/<arch>/<gpu>/<problem>.json), to contribute them back (README: "Tuning").
#
#   tools/tune_shipped.sh [BUCKETS]      BUCKETS: comma-separated token counts (default: moegen tune's)
#
# Each line below: model, split options, and the candidates (the whole space for DeepSeek-V4-Flash and
# gpt-oss-120b, the arch's shortlist elsewhere).  NO_BUILD=1 tunes the builds already in generated/ (built
# elsewhere and copied here, say, to spare this machine the compiles).
set -euo pipefail
cd "$(dirname "$0")/.."
BUCKETS=${1:-}
while read -r model kernels split; do
  [ -n "$model" ] || continue
  echo "== $model $split ($kernels)"
  python3 -m moegen tune --model "$model" $split --kernels "$kernels" ${NO_BUILD:+--no-build} \
    ${BUCKETS:+--buckets "$BUCKETS"} --table-root configs/dispatch
done <<'LIST'
deepseek-v4-flash all
deepseek-v4-flash shortlist --ep-size 8 --ep-rank 0
deepseek-v3 shortlist
deepseek-v3 shortlist --ep-size 8 --ep-rank 0
gpt-oss-120b all
gpt-oss-120b shortlist --tp 2
gpt-oss-20b shortlist
gpt-oss-20b shortlist --tp 2
qwen3-30b-a3b shortlist
qwen3-30b-a3b shortlist --ep-size 4 --ep-rank 0
deepseek-v4-flash shortlist --activations fp8
deepseek-v3 shortlist --activations fp8
gpt-oss-120b shortlist --activations fp8
gpt-oss-120b shortlist --tp 2 --activations fp8
gpt-oss-20b shortlist --activations fp8
gpt-oss-20b shortlist --tp 2 --activations fp8
qwen3-30b-a3b shortlist --activations fp8
deepseek-v4-flash shortlist --ep-size 8 --ep-rank 0 --activations fp8
deepseek-v3 shortlist --ep-size 8 --ep-rank 0 --activations fp8
qwen3-30b-a3b shortlist --ep-size 4 --ep-rank 0 --activations fp8
LIST
