#!/usr/bin/env bash
# x1-stg53.sh — run 53, call 5 (1 GPU). Call 4's Nsight Compute samples put the FP8 dispatch's warps at world 1 mostly
# on the sinks' fields loaded from shared memory between a pass's stores (each waiting for the one before: stores
# through generic pointers, and a branch a sink for the scale). SY_HT_STG=1 (weak st.global, no memory clobber, the
# scale by all 8 lanes of a group: no branch) lets the compiler load them ahead. Built both ways; test_gpu_moe_ht with
# it at 1 rank and 3 sharing the GPU; then the FP8 dispatch at 132 SMs b n n b, BF16 at 132 (the copies use it too)
# and FP8 at 16 SMs, n b.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree
dev_start summary.txt
build_tree /tmp/b . "-DSY_HT_STG=0"
build_tree /tmp/n . ""
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/n w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
grep -E "wrong|FAIL|differ|rror" /tmp/t_w1.txt /tmp/t_w3.txt | head -6 >>$s
echo "tests done at $SECONDS s" >>$s
R="dispatch|combine"
for v in b n n b; do
  [ $SECONDS -lt 330 ] && bench_tree /tmp/$v "fp8 132 ($v)" 1 "$R" --tokens 4096 --num-sms 132 --wire fp8
done
for v in n b; do
  [ $SECONDS -lt 360 ] && bench_tree /tmp/$v "bf16 132 ($v)" 1 "$R" --tokens 4096 --num-sms 132 --wire bf16
done
for v in n b; do
  [ $SECONDS -lt 390 ] && bench_tree /tmp/$v "fp8 16 ($v)" 1 "dispatch" --tokens 4096 --num-sms 16 --wire fp8
done
cat $s
