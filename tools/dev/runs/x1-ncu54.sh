#!/usr/bin/env bash
# x1-ncu54.sh — run 54's fourth one-GPU call (~4 minutes). x1-layout54.sh found the layout's latency fixes level
# (b 35.9 us, n 35.0-35.3 at 16 SMs; 132 SMs level too): the time is not where the model put it. Nsight Compute on
# the five layout kernels of one layout call (world 1, 4,096 tokens, BF16, 16 SMs), both trees (b: the code before,
# n: this tree): each kernel's duration, its warp states and the SASS lines its stall samples fall on.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
mkdir -p /tmp/bs && tar --exclude=./build --exclude=./ab -cf - . | tar -xf - -C /tmp/bs
(cd /tmp/bs && patch -R -p1 <tools/dev/patches/layout-latency.patch >/dev/null) || echo "reverse patch failed" >>$s
build_tree /tmp/n . ""
build_tree /tmp/b /tmp/bs ""
echo "builds done at $SECONDS s" >>$s
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p $OUT/ncu
for v in b n; do
  timeout 150 /tmp/$v/bin/syrun -n 1 "$ncu" --section SpeedOfLight --section WarpStateStats --section SourceCounters \
    --section LaunchStats --cache-control none --clock-control none -k "regex:^sy_ht_layout" -s 40 -c 5 -f \
    -o /tmp/l_$v /tmp/$v/bin/sy-bench --no-nccl -n 3 -w 5 --tokens 4096 --num-sms 16 --wire bf16 moe-ht >/tmp/l_$v.log 2>&1 ||
    tail -5 /tmp/l_$v.log >>$s
  "$ncu" -i /tmp/l_$v.ncu-rep --page details >$OUT/ncu/layout_$v.txt 2>&1
  "$ncu" -i /tmp/l_$v.ncu-rep --page source --csv --print-source sass >$OUT/ncu/layout_$v.sass.csv 2>/dev/null
  echo "== ncu layout ($v) at $SECONDS s" >>$s
  grep -E "^  sy_ht_layout|Duration|Warp Cycles Per Issued|Issue Slots Busy|Memory Throughput" $OUT/ncu/layout_$v.txt >>$s
done
cat $s
