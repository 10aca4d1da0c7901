#!/usr/bin/env bash
# x1-sms56.sh — ready for the next one-GPU call (not run; ~4 minutes). tools/dev/patches/ht-sms-check.patch (written
# after run 55's device time, compiled, not run): sy_moe_ht_create refuses, from world 2, a config.num_sms whose
# dispatch and combine grids the GPU cannot hold at once (occupancy x SMs), with SY_ERR_INVALID_ARG naming
# config->num_sms — today such a budget makes every call wait for blocks that cannot start, ending in
# SY_ERR_TIMEOUT after the bound. test_gpu_moe_ht's new first check (too_many_sms): num_sms 1,024 refused at world 2
# to 4 (ranks sharing the GPU), made at world 1. p = the patch: the whole test at 1, 2, 3 and 4 ranks sharing the
# GPU (every other case must still be made: the check must not refuse the cases' budgets of 1 to 32).
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
mkdir -p /tmp/pb && tar --exclude=./build -cf - . | tar -xf - -C /tmp/pb
(cd /tmp/pb && patch -p1 <tools/dev/patches/ht-sms-check.patch >/dev/null) || echo "patch failed" >>$s
build_tree /tmp/p /tmp/pb ""
echo "build done at $SECONDS s" >>$s
test_ht /tmp/p w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/p w2 2 "--gpus 0,0"
test_ht /tmp/p w3 3 "--gpus 0,0,0"
test_ht /tmp/p w4 4 "--gpus 0,0,0,0"
grep -E "wrong|WRONG|FAIL|differ|rror|num_sms" /tmp/t_*.txt | cut -c1-220 | head -16 >>$s
cat $s
