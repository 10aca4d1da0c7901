#!/usr/bin/env bash
# x4-probe-bins.sh — next after run 42 (bench/NOTES.md, "the n > 1 guard, who writes the own rows"): at world n (4
# best), with recv in the arena, the senders wait ~420 us for ring room (8,192 tokens, BF16) whatever the rings' depth,
# and with the receivers' own rows capped both sides waited. Do the two roles wait at the same time or in turns, and
# on every channel and rank or on a few (a convoy)? A build with -DSY_HT_PROBE_BINS=8 (the probe's own, wait and work
# in bins of 262 us since each role's start; the default build is unchanged without it) runs the probe of the BF16
# and FP8 dispatch at 8,192 tokens and BF16 at 4,096, 16 SMs; every rank's probe file to $OUT, the digest of the
# dispatch (tools/dev/ht-probe.py --blocks --bins) to $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=6G
build_tree /tmp/xP . "-DSY_HT_PROBE_BINS=8"
for c in "8192 bf16" "8192 fp8" "4096 bf16"; do
  set -- $c
  d=$OUT/probe_$1_$2 && mkdir -p $d
  SY_HT_PROBE=$d/probe.%r.txt timeout 120 /tmp/xP/bin/syrun -n $n /tmp/xP/bin/sy-bench --no-nccl --tokens $1 --wire $2 \
    --num-sms 16 --recv arena moe-ht >/tmp/pb.txt 2>&1
  echo "== probe with bins: world $n, $1 tokens, $2, 16 SMs, arena rc=$?" >>$s
  grep -E " dispatch " /tmp/pb.txt | sed 's/\[rank 0\]//' >>$s
  python3 tools/dev/ht-probe.py --blocks --bins --kernel dispatch $d/probe.*.txt >>$s 2>&1
done
[ -n "${X_NO_CAT:-}" ] || cat $s
