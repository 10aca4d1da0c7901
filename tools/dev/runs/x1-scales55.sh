#!/usr/bin/env bash
# x1-scales55.sh — run 55's first one-GPU call (~4 minutes; ran 2026-11-29: −0.2% to −1.4%, not kept; history run 55). Issue 19's FP8 dispatch at world 1
# (65.4-65.5% of the copy's rate against >= 70%, run 54): since SY_HT_STG (run 53) its warps wait on the stores
# themselves, and the bulk copies of the own rows lost (run 54: +12.9%). tools/dev/patches/ht-scale-lanes.patch
# (SY_HT_SCALE_LANES, written after run 54's device time, compiled, not run): a pass's scales into its sinks by one
# store instruction where a token has 1 to 8 sinks (lane j of each group stores sink j's), else one a round of 8
# sinks, instead of one a sink by all 8 lanes of each group: 224 store instructions a token at hidden 7168 with 8
# rows -> 126, the same sectors. ptxas: the plain kernels spill 60 bytes (52 before), the roles kernels 44 (40-52).
# A helper's review: the same bits for every n >= 1; its n = 0 case (a store into a stale sink, unreachable from
# today's callers) fixed. Predicted: a few us at 132 SMs if the stores' issue is what the warps
# wait on; nothing if it is the sectors. p = the patch, h = this tree. Tests with p at 1 rank, 3 sharing the GPU
# with the FP8 quantised in the kernel (ring slots as sinks) and through the put path; then the FP8 dispatch at 132
# SMs h p p h and at 16 SMs p h; BF16 (no scales) once each as a control.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree
dev_start summary.txt
mkdir -p /tmp/pb && tar --exclude=./build --exclude=./ab -cf - . | tar -xf - -C /tmp/pb
(cd /tmp/pb && patch -p1 <tools/dev/patches/ht-scale-lanes.patch >/dev/null) || echo "patch failed" >>$s
build_tree /tmp/p /tmp/pb ""
build_tree /tmp/h . ""
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/p w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/p w3 3 "--gpus 0,0,0" SY_HT_PREQUANT=0
test_ht /tmp/p put3 3 "--gpus 0,0,0" SY_FORCE_PUT=1 SY_HT_PREQUANT=0
grep -E "wrong|WRONG|FAIL|differ|rror" /tmp/t_w1.txt /tmp/t_w3.txt /tmp/t_put3.txt | cut -c1-160 | head -8 >>$s
for v in h p p h; do
  [ $SECONDS -lt 420 ] && bench_tree /tmp/$v "fp8 132 ($v)" 1 "dispatch" --tokens 4096 --num-sms 132 --wire fp8
done
for v in p h; do
  [ $SECONDS -lt 480 ] && bench_tree /tmp/$v "fp8 16 ($v)" 1 "dispatch" --tokens 4096 --num-sms 16 --wire fp8
done
for v in h p; do
  [ $SECONDS -lt 520 ] && bench_tree /tmp/$v "bf16 132 ($v)" 1 "dispatch" --tokens 4096 --num-sms 132 --wire bf16
done
cat $s
