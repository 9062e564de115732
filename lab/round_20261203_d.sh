#!/usr/bin/env bash
# Round 2026-12-03 d (eleventh session): what bounds the decode and mid-T buckets that miss issue 20's
# bars, with the current kernels.  Built here:
#   python3 lab/ablation.py build /work/abl/dec16 --model deepseek-v4-flash \
#       --variants base,nowiden,nomma,stream,notokens --pick 1:m64n8k128s4,m64n32k128s4 \
#       --pick 4:m64n8k128s4,m64n8k128s6 --pick 64:m64n8k128s4,m64n8k128s6 --pick 256:m64n16k128s4,m64n32k64s4
#   python3 lab/ablation.py build /work/abl/dec8 --model deepseek-v4-flash --activations fp8 \
#       --variants base,nowiden,stream --pick 1:m64n8k128s4,m64n16k128s4 --pick 4:m64n8k128s8,m64n8k128s4
#   python3 lab/ablation.py build /work/abl/depth --model deepseek-v4-flash --variants base,stream \
#       --pick 1:m64n8k128s8,m64n8k128s8 --pick 4:m64n8k64s8,m64n8k64s8
#   python3 lab/ablation.py pack /work/abl/NAME .carry/NAME     (after lab/stage_carry.sh, which clears .carry)
# Parts:
#   A <NAME>: the ablation's timelines (tools/timeline.py per variant): dec16, DeepSeek-V4-Flash's
#      shipped BF16 picks at T = 1, 4, 64 and 256; dec8, its W4A8 picks at T = 1 and 4; depth, 8-deep
#      rings at T = 1 and 4.
#   S: the consumer widening and issuing a 128-deep K tile in two 64-deep steps (half the A fragment
#      registers, 5-6 CTAs per SM instead of 3-4; landed after db064f3, see round e's header):
#      `git apply lab/experiments/consumer_k_steps.patch`,
#      then `moegen build --model deepseek-v4-flash --kernels <the five picks below> --out
#      generated/_exp/step64`.  Staged as two output roots, .carry/step64 (that build) and .carry/abbase
#      (dec16's base variant: the same kernels at HEAD), each holding <variant>/sm90/{manifest.json,
#      libmoegen-*.so} and, as dispatch/sm90/nvidia-h200-132sm/<problem>.json, the shipped table cut to
#      its T <= 256 buckets (the libraries hold only those picks).  Every output bit against HEAD
#      (lab/bitwise_ab.py), the timeline of both, `moegen bench` in both orders.
#   N <T>: ncu stall reasons, instruction mix and DRAM/L2 throughput of the T's two GEMMs (the base
#      variant's library, lab/stall_profile.sh).
# Results in $OUT/results.tgz.     bash lab/round_20261203_d.sh OUT "A dec16" "N 1" ...
set -uo pipefail
OUT=$1
R=/tmp/round_20261203_d; mkdir -p $R
pack() { tar czf "$OUT/results.tgz" -C $R . ; }
BASE=.carry/dec16/base/generated/deepseek-v4-flash/sm90
for part in "${@:2}"; do
  read -r what t <<< "$part"
  if [ "$what" = A ]; then
    timeout -k 5 300 python3 lab/ablation.py time .carry/$t 2>&1 | grep -v Warning | \
      grep -v "return MoeLayer\|_warn_once" > $R/ablation-$t.txt
    echo "ablation $t rc $?"; grep -E "^==|T=|route|gemm|quantize|finalize" $R/ablation-$t.txt | cut -c1-90; pack
  fi
  if [ "$what" = S ]; then
    A=.carry/abbase; B=.carry/step64
    timeout -k 5 150 python3 lab/bitwise_ab.py $A/deepseek-v4-flash/sm90 $B/deepseek-v4-flash/sm90 deepseek-v4-flash \
      --tokens 1,4,37,300,2048 > $R/bitwise-step64.txt 2>&1
    echo "bitwise rc $?: $(grep -c ': equal' $R/bitwise-step64.txt) equal"; grep -v ': equal' $R/bitwise-step64.txt | tail -4
    picks="1=m64n8k128s4+m64n32k128s4,4=m64n8k128s4+m64n8k128s6,16=m64n8k128s4+m64n8k128s6"
    picks="$picks,64=m64n8k128s4+m64n8k128s6,256=m64n16k128s4+m64n32k64s4"
    for x in abbase step64; do
      timeout -k 5 100 python3 tools/timeline.py deepseek-v4-flash 1,4,16,64,256 .carry/$x/deepseek-v4-flash/sm90 $picks \
        2>&1 | grep -v "Warning\|warn_once\|return MoeLayer" > $R/timeline-$x.txt
      echo "== timeline $x"; grep -E "T=|gemm|finalize" $R/timeline-$x.txt | cut -c1-100
    done
    pack
    for o in a b; do
      if [ $o = a ]; then D=$B; C=head=$A/deepseek-v4-flash/sm90; else D=$A; C=step64=$B/deepseek-v4-flash/sm90; fi
      timeout -k 5 150 python3 -m moegen bench --model deepseek-v4-flash --out $D --compare $C \
        --tokens 1,4,16,64,256 --rounds 4 --json $R/bench-step64-$o.json > $R/bench-step64-$o.txt 2>&1
      echo "bench $o rc $?"; grep -v Warning $R/bench-step64-$o.txt | tail -14 | cut -d'|' -f2-8,13
      pack
    done
  fi
  if [ "$what" = N ]; then
    picks=$(python3 -c "import json; p=json.load(open('.carry/dec16/plan.json'))['picks']['$t']; \
print(f'moegen_sm90_gemm1_{p[0]},moegen_sm90_gemm2_{p[1]}')")
    MOEGEN_PROFILE_KERNELS=$picks timeout -k 5 200 bash lab/stall_profile.sh deepseek-v4-flash $t $BASE \
      > $R/stall-$t.txt 2>&1
    echo "stall $t rc $?"; sed -E 's/ +/ /g' $R/stall-$t.txt | grep -E "==|kernels|duration|inst_executed.sum|issue_active|gmma|dram__|lts__t|warps_active|stalled_(long_scoreboard|wait|barrier|math|short|mio|lg|no_inst|sleeping|selected)" | head -80
    pack
  fi
done
