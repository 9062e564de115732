#!/usr/bin/env bash
# Round r (2026-12-04, a second session): the BF16 tables' small-T buckets retuned.  Every shipped BF16
# table was tuned at buckets 1, 4, 16 only, so T = 2, 3, 6 and 8 borrow a neighbour's pair (gpt-oss-20b's
# W4A16 took 52.8 us at T = 2 in round q against 37.2 at T = 1 and 61.3 at T = 3).  Round o's part T on
# BF16: a library of the one-slice k128 tiles (m64 n8 / n16, s4 / s6 / s8, both GEMMs, and GEMM2
# m64n32k128s4 where K allows it, the shipped T = 1 pick of DeepSeek-V4-Flash and Qwen3-30B-A3B;
# generated/_exp/rb), `moegen tune --buckets 1,2,3,4,6,8` with the shipped tuner settings, then the new
# table against the shipped one on that library (each cut to T <= 8 as its root's user table), both orders.
#   T MODEL   tune, cut, bench (T = 1, 2, 3, 4, 6, 8, `--rounds 4`)
exec env ACT=bf16 ROUND_DIR=/tmp/round_r ROUND_LIB=generated/_exp/rb bash "$(dirname "$0")/round_20261204_o.sh" "$@"
