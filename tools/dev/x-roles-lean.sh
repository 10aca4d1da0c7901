#!/usr/bin/env bash
# x-roles-lean.sh — tools/dev/patches/ht-roles-lean.patch (the roles' code with fewer spills; the by-blocks kernels
# with a6fa9cd's shared memory; written after run 39's device time, not measured) against this tree. With n GPUs (4
# best): test_gpu_moe_ht of the patched tree at n (by warps and by blocks), at 1 rank and with 3 ranks on GPU 0; then
# moe-ht BF16, 4,096 tokens, 16 SMs, H L L H at world n by warps (the default) and by blocks, at world 1 with 16
# and 132 SMs; then a probe by warps (E = 8) at 8,192 tokens. The predictions: by warps at world n at most a few
# percent either way (spills 96 / 80 -> 60 / 48 bytes); at world 1 with 16 SMs the combine and dispatch_bwd back by
# the 1.1% run 39 measured, if the shared memory's placement was the cause. $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, test_ht, bench_tree, probe_tree, dev_start
dev_start summary.txt
rm -rf /tmp/lean && mkdir -p /tmp/lean
tar -C . --exclude=./build --exclude=./ab --exclude=./.git -cf - . | tar -C /tmp/lean -xf -
patch -s -p1 -d /tmp/lean <tools/dev/patches/ht-roles-lean.patch || echo "patch failed" >>$s
build_tree /tmp/xH . "" &
build_tree /tmp/xL /tmp/lean "" &
wait
[ "$n" -ge 2 ] && test_ht /tmp/xL lean$n $n "" X=1
[ "$n" -ge 2 ] && test_ht /tmp/xL leanblocks$n $n "" SY_HT_ROLES=0
test_ht /tmp/xL lean1 1 "" X=1
test_ht /tmp/xL leanshare3 3 "--gpus 0,0,0" X=1
RE="dispatch|combine|combine_bwd|dispatch_bwd"
for cfg in "$n 16 -1" "$n 16 0" "1 16 -1" "1 132 -1"; do
  set -- $cfg
  for v in H L L H; do
    (export SY_HT_ROLES=$3
      bench_tree /tmp/x$v "world $1, $2 SMs, SY_HT_ROLES=$3 ($v)" $1 "$RE" --tokens 4096 --wire bf16 --num-sms $2)
  done
done
[ "$n" -ge 2 ] && probe_tree /tmp/xH "by warps S=6 E=8, 8,192 tokens BF16" $n --tokens 8192 --wire bf16 --num-sms 16
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log 2>/dev/null) 2>/dev/null
cat $s
