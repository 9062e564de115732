#!/usr/bin/env bash
# Round t (prepared 2026-12-04, for the next device session): the split layers' tables, with round s's
# part T on libraries built here (generated/_exp/mid/<variant>/sm90: each split's shortlist, default or
# fallback kernels, and the one-slice k128 tiles; `moegen build ... --kernels <names> --out
# generated/_exp/mid`).
#  - BF16 splits with tables (`--tp 2` of the gpt-oss models, `--ep-size 8` of the DeepSeek models) hold
#    buckets 1, 4, 16, 64, ... only: tune the token counts between them (TOKENS below).
#  - W4A8 splits and Qwen3-30B-A3B `--ep-size 4` have no table (the block_n heuristic): tune every bucket,
#    TOKENS=1,2,3,4,6,8,16,32,64,128,256,512,1024,2048,4096,8192,16384 (the bench then compares against
#    the heuristic).
#  - DeepSeek-V3 W4A8, the one unsplit table round s did not reach: `bash lab/round_20261204_s.sh "T deepseek-v3 fp8"`.
#   bash lab/round_20261204_t.sh "T gpt-oss-120b bf16 --tp 2" "T gpt-oss-20b bf16 --tp 2" \
#        "T deepseek-v4-flash bf16 --ep-size 8 --ep-rank 0" "T deepseek-v3 bf16 --ep-size 8 --ep-rank 0"
#   TOKENS=1,2,...,16384 bash lab/round_20261204_t.sh "T gpt-oss-120b fp8 --tp 2" "T qwen3-30b-a3b bf16 --ep-size 4 --ep-rank 0"
# Expect 3-5 minutes of device time per part (round s: 2-3 minutes for five buckets, both bench orders);
# for every bucket raise the limits (TUNE_LIMIT, BENCH_LIMIT: 420 and 250 s by default).
TOKENS=${TOKENS:-2,3,6,8,32,128,512,2048,8192} exec bash "$(dirname "$0")/round_20261204_s.sh" "$@"
