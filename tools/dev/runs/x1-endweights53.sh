#!/usr/bin/env bash
# x1-endweights53.sh — ran as run 53, call 1 (bench/history/2026-11-29_way-s_1xH200_82fd32b.md). Issue 21 at world 1 with the ends on every SM
# (--end-sms 132, run 52): run 52's timeline left the third group's combine (6/14 of the experts) running ~140 us past
# the last group's GEMMs; a larger last group covers it with its GEMMs and its own combine runs on 132 SMs. Groups
# 1,6,6,1 (run 52's), 1,6,5,2, 1,5,5,3, 2,5,5,2 and 2,6,6,2, then back, ways comm, compute, b, c at 20 passes; then
# 1,5,5,3 checked against the CPU reference (ways a, b, c). First the per-call budget's tests not
# run in run 52: test_gpu_moe_ht's 1,500-token budget cases (rings that fill while blocks serve several channels) at 3
# and 4 ranks sharing the GPU, roles by warps (auto) and by blocks (SY_HT_ROLES=0).
. tools/dev/variant.sh # build_tree, dev_start, test_ht, layer_at
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/h . ""
echo "build done at $SECONDS s" >>$s
test_ht /tmp/h w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
test_ht /tmp/h w3b 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1 SY_HT_ROLES=0
test_ht /tmp/h w4 4 "--gpus 0,0,0,0" SY_HT_OWN_QUEUE=-1
grep -E "wrong|FAIL|differ|1500|rror" /tmp/t_w3.txt /tmp/t_w3b.txt /tmp/t_w4.txt | head -12 >>$s
T="-n 20 -w 2 -c 0 --ways comm,compute,b,c,b,c"
for g in 1,6,6,1 1,6,5,2 1,5,5,3 2,5,5,2 2,6,6,2 2,6,6,2 2,5,5,2 1,5,5,3 1,6,5,2 1,6,6,1; do
  [ $SECONDS -lt 480 ] || break
  layer_at 1 "$g, --end-sms 132" --end-sms 132 --micro-batches $g $T
done
[ $SECONDS -lt 540 ] && layer_at 1 "1,5,5,3, --end-sms 132 checked" --end-sms 132 --micro-batches 1,5,5,3 -n 3 -w 2 \
  --ways a,b,c
cat $s
