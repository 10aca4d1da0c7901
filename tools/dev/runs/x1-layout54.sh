#!/usr/bin/env bash
# x1-layout54.sh — run 54's third one-GPU call (~7 minutes). The layout at world 1 took 28-36 us (run 54, call 2; an
# earlier timeline at 16 SMs: count 12.6 us, prefix ~3, pos ~4, exchange ~12). The count kernel loaded a token's ids
# one after the other, each behind the last one's checks and stores (latency-bound); the exchange's offsets were a
# serial walk by one thread over the L experts' rows. This tree (n): a token's ids loaded before any is used (count
# and pos), the offsets by a block scan. b = this tree with tools/dev/patches/layout-latency.patch reversed (the code
# before). Predicted: the layout ~30 -> ~15 us. Tests (n) at 1 rank, 3 and 4 sharing the GPU (with the new bad-ids
# case: an id repeated or outside [-1, E) reported asynchronously naming token, k and id); moe-ht's layout row at
# 16 and 132 SMs, b n n b; the layer's communication alone (way comm: four layouts a forward step) b n n b.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree
dev_start summary.txt
mkdir -p /tmp/bs && tar --exclude=./build --exclude=./ab -cf - . | tar -xf - -C /tmp/bs
(cd /tmp/bs && patch -R -p1 <tools/dev/patches/layout-latency.patch >/dev/null) || echo "reverse patch failed" >>$s
build_tree /tmp/n . ""
build_tree /tmp/b /tmp/bs ""
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/n w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w4 4 "--gpus 0,0,0,0" SY_HT_OWN_QUEUE=-1
grep -E "bad ids|wrong|WRONG|FAIL|differ|rror" /tmp/t_w1.txt /tmp/t_w3.txt /tmp/t_w4.txt | head -12 >>$s
echo "tests done at $SECONDS s" >>$s
for sms in 16 132; do
  for v in b n n b; do
    bench_tree /tmp/$v "layout $sms ($v)" 1 "layout" --tokens 4096 --num-sms $sms --wire bf16
  done
done
export SY_HEAP_SIZE=24G
for v in b n n b; do
  [ $SECONDS -lt 500 ] || break
  timeout 100 /tmp/$v/bin/syrun -n 1 /tmp/$v/bin/sy-bench --no-nccl --recv arena --tokens 4096 --split experts \
    --micro-batches 1,5,5,3 --end-sms 132 -n 20 -w 2 -c 0 --settle 1 --ways comm layer >/tmp/l.txt 2>&1
  echo "== layer comm ($v) rc=$? at $SECONDS s" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|wrong|rror" /tmp/l.txt | sed 's/\[rank 0\]//' >>$s
done
cat $s
