#!/usr/bin/env bash
# x4-inplace-proxy.sh — before building the dispatch's first copy in place (bench/NOTES.md, run 40): how much the
# receivers would save. tools/dev/patches/ht-skip-first.patch leaves each message's first row unwritten (its rows are
# then wrong: #wrong > 0 is expected in S's rows), which is the receivers' share of the change; the senders' share
# (their NVLink stores into rows instead of ring slots) is the same bytes. World n (4 best), 16 SMs, BF16 and FP8
# dispatch, 4,096 and 8,192 tokens, T S S T (T = this tree); then probes of both at 8,192 tokens BF16. The design's
# bound predicts up to -23% at 16 SMs if the senders keep up (they waited 456 of 1,939 us at 8,192 tokens, run 40).
# $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, bench_tree, probe_tree, dev_start
dev_start summary.txt
rm -rf /tmp/skip && mkdir -p /tmp/skip
tar -C . --exclude=./build --exclude=./ab --exclude=./.git -cf - . | tar -C /tmp/skip -xf -
patch -s -p1 -d /tmp/skip <tools/dev/patches/ht-skip-first.patch || echo "patch failed" >>$s
build_tree /tmp/xT . "" &
build_tree /tmp/xS /tmp/skip "-DSY_HT_SKIP_FIRST=1" &
wait
for tok in 4096 8192; do
  for v in T S S T; do
    bench_tree /tmp/x$v "world $n, 16 SMs, $tok tokens, BF16 ($v)" $n "dispatch" --tokens $tok --wire bf16 --num-sms 16
    bench_tree /tmp/x$v "world $n, 16 SMs, $tok tokens, FP8 ($v)" $n "dispatch" --tokens $tok --wire fp8 --num-sms 16
  done
done
for v in T S; do
  probe_tree /tmp/x$v "($v) 8,192 tokens BF16, 16 SMs" $n --tokens 8192 --wire bf16 --num-sms 16
done
cat $s
