#!/usr/bin/env bash
# x2-budget53.sh — ready for two GPUs (not run yet). sy_moe_ht_set_num_sms from world 2, where a call below
# config.num_sms serves the object's channels B at a time (the rings stay the object's): test_gpu_moe_ht at 2 ranks
# (the budget cases over a link); the layer at world 2, 4,096 tokens, 2 expert groups, the ends at 16 and at 132,
# and the whole step's communication alone (way comm) on both objects: what serving 66 channels 8 at a time costs at
# 16 SMs where the rings are used.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, layer_at
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/h . ""
echo "build done at $SECONDS s" >>$s
test_ht /tmp/h w2 2 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/h w2b 2 "" SY_HT_OWN_QUEUE=-1 SY_HT_ROLES=0
grep -E "wrong|FAIL|differ|budgets |rror" /tmp/t_w2.txt /tmp/t_w2b.txt | head -12 >>$s
T="-n 20 -w 2 -c 0 --ways comm,compute,b,c,b,c"
for e in 0 132 132 0; do
  [ $SECONDS -lt 450 ] || break
  if [ $e = 0 ]; then layer_at 2 "2 groups, ends at 16" --micro-batches 2 $T; else layer_at 2 "2 groups, --end-sms $e" --micro-batches 2 --end-sms $e $T; fi
done
[ $SECONDS -lt 520 ] && layer_at 2 "2 groups --end-sms 132 checked" --micro-batches 2 --end-sms 132 -n 3 -w 2 --ways a,b,c
cat $s
