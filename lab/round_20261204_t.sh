#!/usr/bin/env bash
# Round t (2026-12-04): the split layers' tables, with round s's part T on libraries built here
# (generated/_exp/mid/<variant>/sm90: each split's shortlist, default or fallback kernels, and the one-slice
# k128 tiles: `moegen build --model M [SPLIT] --activations A --kernels "$(python lab/mid_kernels.py M A TP EP
# RANK)" --out generated/_exp/mid`; splits of equal GEMM shapes share objects, e.g. gpt-oss-20b and
# gpt-oss-120b --tp 2).  Done (lab/table_ab.md "The splits' tables"; round u ran the third session's):
# every W4A8 split's whole table, both gpt-oss --tp 2 BF16 tables between their x4 buckets.  Still to run:
#  - BF16 --ep-size 8 of the DeepSeek models between their x4 buckets (TOKENS below):
#      bash lab/round_20261204_t.sh "T deepseek-v4-flash bf16 --ep-size 8 --ep-rank 0" \
#        "T deepseek-v3 bf16 --ep-size 8 --ep-rank 0"
#  - DeepSeek-V3 W4A8 between the buckets: `bash lab/round_20261204_s.sh "T deepseek-v3 fp8"`.
# With 32 local experts the small buckets want ROTATIONS=8 (round u); lab/bench_verdict.py then decides.
# A whole table: tune in two calls' worth (SKIP_BENCH=1, TOKENS=1,...,128 then 256,...,16384: 2-2.5 min each),
# then SKIP_TUNE=1 BENCH_TOKENS=1,4,16,64,256,1024,4096,16384 (about 2.5 min for both orders).
# Expect 3-5 minutes of device time per part (round s: 2-3 minutes for five buckets, both bench orders);
# for every bucket raise the limits (TUNE_LIMIT, BENCH_LIMIT: 420 and 250 s by default).
TOKENS=${TOKENS:-2,3,6,8,32,128,512,2048,8192} exec bash "$(dirname "$0")/round_20261204_s.sh" "$@"
