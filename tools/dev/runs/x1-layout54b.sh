#!/usr/bin/env bash
# x1-layout54b.sh — run 54's fifth one-GPU call (~5 minutes). Nsight Compute (x1-ncu54.sh) put the layout's time at
# 16 SMs in count 13.5 us, prefix 11.7, pos 5.7, exchange 7.4-8.1, zero 2.1: count, prefix and pos ran a thread a
# token (a block an expert) on 256-thread blocks, eight warps an SM whose loads waited one after the other (count:
# 2,100 SM-active cycles of 26,700 on average over the GPU). This tree (n): a thread an entry (token, k) on
# 1,024-thread blocks for count and pos (coalesced ids, the earlier ids of its token re-read from L1), a warp an
# expert for prefix, the exchange's offsets by a block scan. b = this tree with tools/dev/patches/layout-entries.patch
# reversed (the code before). Predicted: the three kernels ~31 -> ~6 us; the layout ~35 -> ~15 us at 16 SMs; the
# layer's communication alone (four layouts a forward step) ~-80 us. Tests (n) at 1 rank, 3 and 4 sharing the GPU;
# moe-ht's layout row at 16 and 132 SMs, b n n b; the layer's way comm b n n b; Nsight Compute on n's five kernels.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree
dev_start summary.txt
mkdir -p /tmp/bs && tar --exclude=./build --exclude=./ab -cf - . | tar -xf - -C /tmp/bs
(cd /tmp/bs && patch -R -p1 <tools/dev/patches/layout-entries.patch >/dev/null) || echo "reverse patch failed" >>$s
build_tree /tmp/n . ""
build_tree /tmp/b /tmp/bs ""
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/n w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w4 4 "--gpus 0,0,0,0" SY_HT_OWN_QUEUE=-1
grep -E "bad ids|wrong|WRONG|FAIL|differ|rror" /tmp/t_w1.txt /tmp/t_w3.txt /tmp/t_w4.txt | cut -c1-160 | head -12 >>$s
echo "tests done at $SECONDS s" >>$s
for sms in 16 132; do
  for v in b n n b; do
    bench_tree /tmp/$v "layout $sms ($v)" 1 "layout" --tokens 4096 --num-sms $sms --wire bf16
  done
done
export SY_HEAP_SIZE=24G
for v in b n n b; do
  [ $SECONDS -lt 420 ] || break
  timeout 100 /tmp/$v/bin/syrun -n 1 /tmp/$v/bin/sy-bench --no-nccl --recv arena --tokens 4096 --split experts \
    --micro-batches 1,5,5,3 --end-sms 132 -n 20 -w 2 --settle 1 --ways comm layer >/tmp/l.txt 2>&1
  echo "== layer comm ($v) rc=$? at $SECONDS s" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|rror" /tmp/l.txt | sed 's/\[rank 0\]//' >>$s
done
unset SY_HEAP_SIZE
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p $OUT/ncu
if [ $SECONDS -lt 470 ]; then
  timeout 100 /tmp/n/bin/syrun -n 1 "$ncu" --section SpeedOfLight --section WarpStateStats --section LaunchStats \
    --cache-control none --clock-control none -k "regex:^sy_ht_layout" -s 40 -c 5 -f -o /tmp/l_n \
    /tmp/n/bin/sy-bench --no-nccl -n 3 -w 5 --tokens 4096 --num-sms 16 --wire bf16 moe-ht >/tmp/l_n.log 2>&1 ||
    tail -5 /tmp/l_n.log >>$s
  "$ncu" -i /tmp/l_n.ncu-rep --page details >$OUT/ncu/layout_n.txt 2>&1
  echo "== ncu layout (n) at $SECONDS s" >>$s
  grep -E "^  sy_ht_layout|Duration|Registers Per" $OUT/ncu/layout_n.txt >>$s
fi
cat $s
