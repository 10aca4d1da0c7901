#!/usr/bin/env bash
# x1-tally54.sh — run 54's sixth one-GPU call (~4 minutes, the session's last device time). x1-layout54b.sh: a thread
# an entry on 1,024-thread blocks took the layout at 16 SMs 35.7-36.0 -> 26.9-27.1 us, prefix 11.7 -> 4.9 us, but
# count stayed at 14.5 us. Its global atomics meet on few counters (the experts' counts: 128 adds each; at world 1
# the send counts: 256 a channel). This tree: the count kernel's tallies in shared memory, added into global memory
# once a block. Predicted: count 14.5 -> ~5 us, the layout ~27 -> ~18 us. Tests at 1 rank and 3 sharing the GPU,
# the layout row at 16 and 132 SMs, Nsight Compute's durations of the five kernels.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree
dev_start summary.txt
build_tree /tmp/n . ""
echo "build done at $SECONDS s" >>$s
test_ht /tmp/n w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
grep -E "wrong|WRONG|FAIL|differ|rror" /tmp/t_w1.txt /tmp/t_w3.txt | cut -c1-160 | head -8 >>$s
echo "tests done at $SECONDS s" >>$s
bench_tree /tmp/n "layout 16" 1 "layout" --tokens 4096 --num-sms 16 --wire bf16
bench_tree /tmp/n "layout 132" 1 "layout" --tokens 4096 --num-sms 132 --wire bf16
bench_tree /tmp/n "layout 16" 1 "layout" --tokens 4096 --num-sms 16 --wire bf16
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p $OUT/ncu
if [ $SECONDS -lt 160 ]; then
  timeout 60 /tmp/n/bin/syrun -n 1 "$ncu" --section SpeedOfLight --cache-control none --clock-control none \
    -k "regex:^sy_ht_layout" -s 40 -c 5 -f -o /tmp/l_n /tmp/n/bin/sy-bench --no-nccl -n 3 -w 5 --tokens 4096 \
    --num-sms 16 --wire bf16 moe-ht >/tmp/l_n.log 2>&1 || tail -5 /tmp/l_n.log >>$s
  "$ncu" -i /tmp/l_n.ncu-rep --page details >$OUT/ncu/layout_tally.txt 2>&1
  echo "== ncu layout at $SECONDS s" >>$s
  grep -E "^  sy_ht_layout|Duration" $OUT/ncu/layout_tally.txt >>$s
fi
cat $s
