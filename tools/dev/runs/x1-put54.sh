#!/usr/bin/env bash
# x1-put54.sh — run as part of x1-faults54.sh (run 54, call 2: every test passed). The review of SY_HT_STG (run 53) found its
# NVSHMEM put path (the staging buffer written by the st.global stores, then read by ht_put_warp after __syncwarp)
# not run with it: test_gpu_moe_ht with SY_FORCE_PUT=1 at 3 ranks sharing the GPU (roles by warps and by blocks) and
# at 2, and the FP8 wires quantised in the kernel from world 2 (SY_HT_PREQUANT=0: warp_quantise into ring slots and
# staging, not only rows).
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
build_tree /tmp/h . ""
echo "build done at $SECONDS s" >>$s
test_ht /tmp/h put3 3 "--gpus 0,0,0" SY_FORCE_PUT=1
test_ht /tmp/h put3b 3 "--gpus 0,0,0" SY_FORCE_PUT=1 SY_HT_ROLES=0
test_ht /tmp/h put2 2 "--gpus 0,0" SY_FORCE_PUT=1 SY_HT_PREQUANT=0
test_ht /tmp/h ink3 3 "--gpus 0,0,0" SY_HT_PREQUANT=0
grep -E "wrong|FAIL|differ|rror" /tmp/t_put3.txt /tmp/t_put3b.txt /tmp/t_put2.txt /tmp/t_ink3.txt | head -12 >>$s
cat $s
