#!/usr/bin/env bash
# x2-pullalign61.sh — two GPUs (~3 minutes): call 4 ruled out the message order (pullx chunked: 517.6 us) and the
# source buffer (own tokens from the caller's: unchanged); one store a message still ran at a third of pullx's op rate.
# Left: the rows' layout — pullx packs rows densely, the dispatch pads each expert to 128 rows (1.8 MB boundaries).
# Pull and push at expert alignment 1 and 128, 16 SMs, 4,096 tokens, both wires.
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_main
for a in 1 128; do for p in 1 0; do
  ( export SY_HT_PULL=$p; bench_tree build "pull $p, alignment $a" $n "dispatch" --tokens 4096 --num-sms 16 \
    --recv arena --alignment $a )
done; done
rm -rf /tmp/probe_t && mkdir -p /tmp/probe_t
SY_HT_PULL=1 SY_HT_PROBE=/tmp/probe_t/probe.%r.txt timeout 120 build/bin/syrun -n $n build/bin/sy-bench --no-nccl \
  --tokens 4096 --wire bf16 --num-sms 16 --recv arena --alignment 1 moe-ht >/dev/null 2>&1
echo "== probe pull, alignment 1 rc=$?" >>$s
python3 tools/dev/ht-probe.py --kernel dispatch /tmp/probe_t/probe.0.txt >>$s 2>&1
echo "end at $SECONDS s" >>$s
cat $s
