#!/usr/bin/env bash
# x1-sms56.sh — run 56, call 1 (one GPU, ~5 minutes). (a) The tree with ht-sms-check.patch applied (sy_moe_ht_create
# refuses, from world 2, a config.num_sms whose dispatch and combine grids the GPU cannot hold at once, naming
# config->num_sms): test_gpu_moe_ht at 1, 2, 3 and 4 ranks sharing the GPU (its new first check too_many_sms; every
# other case must still be made). (b) Whether the FP8 dispatch at world 1 on 132 SMs loses to its tail: a warp a
# token, ~1.9 tokens a warp at 4,096 tokens (2,112 warps); if the share of the copy's rate rises with the tokens
# (4,096 -> 8,192 -> 16,384), the kernel's last tokens (the ramp-down) cost part of the gap to 70%. BF16 beside.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree
dev_start summary.txt
build_tree /tmp/m . ""
echo "build done at $SECONDS s" >>$s
test_ht /tmp/m w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/m w2 2 "--gpus 0,0" SY_HT_OWN_QUEUE=-1
test_ht /tmp/m w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
test_ht /tmp/m w4 4 "--gpus 0,0,0,0" SY_HT_OWN_QUEUE=-1
grep -E "wrong|WRONG|FAIL|differ|rror|num_sms" /tmp/t_*.txt | cut -c1-220 | head -16 >>$s
echo "tests done at $SECONDS s" >>$s
for pass in 1 2; do
  for t in 4096 8192 16384; do
    for w in fp8 bf16; do
      bench_tree /tmp/m "$w $t 132 (pass $pass)" 1 "dispatch" --tokens $t --wire $w --num-sms 132
    done
  done
done
echo "end at $SECONDS s" >>$s
cat $s
