#!/usr/bin/env bash
# x2-budget53.sh — ready for two GPUs (not run yet). Three questions from runs 52 and 53 that need a link:
# 1. sy_moe_ht_set_num_sms from world 2, where a call below config.num_sms serves the object's channels B at a time
#    (the rings stay the object's): test_gpu_moe_ht at 2 ranks (the budget cases over a link), roles by warps and by
#    blocks; the layer at world 2, 4,096 tokens, 2 expert groups, the ends at 16 and at 132, and the whole step's
#    communication alone (way comm) on both objects.
# 2. Does the overlap pay across a link? Way s (no overlap, every communication call on --end-sms SMs) beside b and
#    c in the same process: at world 1 s was the fastest step (run 53).
# 3. SY_HT_STG (the sinks' stores as st.global, run 53) from world 2, where the roles kernels now spill 52 bytes:
#    moe-ht at world 2, 16 SMs, BF16 and FP8, b = -DSY_HT_STG=0 against the default, b n n b.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, layer_at, bench_tree
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/h . ""
build_tree /tmp/b . "-DSY_HT_STG=0"
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/h w2 2 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/h w2b 2 "" SY_HT_OWN_QUEUE=-1 SY_HT_ROLES=0
grep -E "wrong|FAIL|differ|budgets |rror" /tmp/t_w2.txt /tmp/t_w2b.txt | head -12 >>$s
for v in b h h b; do
  [ $SECONDS -lt 240 ] || break
  d=/tmp/$v
  bench_tree $d "world 2, 16 SMs, bf16 ($v)" 2 "dispatch|combine|combine_bwd|dispatch_bwd" --tokens 4096 --wire bf16
  bench_tree $d "world 2, 16 SMs, fp8 ($v)" 2 "dispatch" --tokens 4096 --wire fp8
done
T="-n 20 -w 2 -c 0 --ways comm,compute,b,c,b,c"
[ $SECONDS -lt 300 ] && layer_at 2 "2 groups, ends at 16" --micro-batches 2 $T
[ $SECONDS -lt 360 ] && layer_at 2 "2 groups, --end-sms 132, s" --micro-batches 2 --end-sms 132 -n 20 -w 2 -c 0 \
  --ways comm,compute,s,b,c,s,b,c
grep "against way s" /tmp/layer.txt | head -1 >>$s
[ $SECONDS -lt 440 ] && layer_at 2 "2 groups, 16,384 tokens, --end-sms 132, s" --micro-batches 2 --end-sms 132 \
  --tokens 16384 -n 8 -w 2 -c 0 --ways comm,compute,s,b,s,b
grep "against way s" /tmp/layer.txt | head -1 >>$s
[ $SECONDS -lt 520 ] && layer_at 2 "2 groups --end-sms 132 checked" --micro-batches 2 --end-sms 132 -n 3 -w 2 --ways a,s,b,c
cat $s
