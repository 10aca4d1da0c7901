#!/usr/bin/env bash
# x4-probe-sms60.sh — run 60, call 4 (four GPUs, ~4 minutes): x4-probe-sms.sh trimmed to the device time left. Call 1
# measured the combine kernel by warps flat from 16 to 48 SMs at world 4 (870 -> 865 -> 897 -> 874 us) while by blocks
# it scales (997 -> 782 -> 767 -> 750). SY_HT_PROBE at world 4, BF16, 4,096 tokens, recv in the arena, by warps
# (SY_HT_ROLES=1) and by blocks (0) at 16 and 32 SMs: rank 0's tables (what each role's warps spend moving, waiting,
# on own rows).
. tools/dev/variant.sh # build_tree, probe_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_tree /tmp/xP . ""
echo "build done at $SECONDS s" >>$s
for sms in 32 16; do
  for r in 1 0; do
    [ $SECONDS -gt 230 ] && break
    SY_HT_ROLES=$r probe_tree /tmp/xP "SY_HT_ROLES=$r, $sms SMs, 4,096 tokens BF16" $n --tokens 4096 --wire bf16 \
      --recv arena --num-sms $sms
  done
done
echo "end at $SECONDS s" >>$s
cat $s
