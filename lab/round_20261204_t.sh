#!/usr/bin/env bash
# Round t (prepared 2026-12-04, for the next device session): the split tables (`--tp 2` of the gpt-oss
# models, `--ep-size 8` of the DeepSeek models) have buckets 1, 4, 16, 64, ... only; tune the token counts
# between them, small and mid, with round s's parts on libraries of each split's shortlist, default
# kernels and one-slice k128 tiles (generated/_exp/mid/<variant>/sm90, built with `moegen build ... --kernels
# <names> --out generated/_exp/mid`). Then DeepSeek-V3 W4A8, the one table round s did not reach, with
# round s itself (`bash lab/round_20261204_s.sh "T deepseek-v3 fp8"`).
#   bash lab/round_20261204_t.sh "T gpt-oss-120b bf16 --tp 2" "T gpt-oss-20b bf16 --tp 2" \
#        "T deepseek-v4-flash bf16 --ep-size 8 --ep-rank 0" "T deepseek-v3 bf16 --ep-size 8 --ep-rank 0"
TOKENS=${TOKENS:-2,3,6,8,32,128,512,2048,8192} exec bash "$(dirname "$0")/round_20261204_s.sh" "$@"
