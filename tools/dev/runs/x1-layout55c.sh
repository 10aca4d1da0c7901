#!/usr/bin/env bash
# x1-layout55c.sh — run 55's fifth one-GPU call (~6 minutes). After a helper's review of the one-kernel layout: a
# block whose grid barrier fails (timeout, abort) now makes the last block mark the handle unwritten (ht_local.lfail;
# the exchange's block alone did before, so a failure in prefix or pos left a handle marked written), and the grid is
# capped at the blocks the GPU holds at once (occupancy x SMs; a budget above the SM count made every layout time
# out). Tests (n) at 1 and 3 sharing; then n against h (tools/dev/patches/layout-one.patch reversed: the five
# kernels) at more shapes: the layout row at 16 SMs, 16,384 and 8,192 tokens, h n n h; the layer's communication
# alone (way comm: 4 expert groups, 4 layouts a forward step) at 4,096 tokens, h n n h.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree
dev_start summary.txt
mkdir -p /tmp/hb && tar --exclude=./build -cf - . | tar -xf - -C /tmp/hb
(cd /tmp/hb && patch -R -p1 <tools/dev/patches/layout-one.patch >/dev/null) || echo "reverse patch failed" >>$s
build_tree /tmp/n . ""
build_tree /tmp/h /tmp/hb ""
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/n w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w3 3 "--gpus 0,0,0"
grep -E "wrong|WRONG|FAIL|differ|rror" /tmp/t_w1.txt /tmp/t_w3.txt | cut -c1-200 | head -8 >>$s
echo "tests done at $SECONDS s" >>$s
for t in 16384 8192; do
  for v in h n n h; do
    [ $SECONDS -lt 380 ] && bench_tree /tmp/$v "layout $t, 16 SMs ($v)" 1 "layout" --tokens $t --num-sms 16 --wire bf16
  done
done
export SY_HEAP_SIZE=24G
for v in h n n h; do
  [ $SECONDS -lt 500 ] || continue
  timeout 60 /tmp/$v/bin/syrun -n 1 /tmp/$v/bin/sy-bench --no-nccl --tokens 4096 --split experts --micro-batches \
    1,5,5,3 --settle 1 -n 20 -w 2 -c 0 --ways comm layer >/tmp/layer.txt 2>&1
  echo "== layer comm 4096 ($v) rc=$? at $SECONDS s" >>$s
  grep -E "^(\[rank 0\] )? *(prefill|backward) " /tmp/layer.txt | sed 's/\[rank 0\]//' >>$s
done
cat $s
