#!/usr/bin/env bash
# x2-weights46.sh — run 46: sy-bench layer with each expert's own weights (--expert-weights distinct, new: the
# default) against one pair for all (shared: every run before 46), at world 1 (GPU 0) and world $n, 4,096 and 16,384
# tokens, two micro-batches, ways comm, compute, gemms (now on written operands), a, b, c; every GPU's SM clock and
# power every 50 ms ($OUT/smi.txt) beside each way's wall-clock span ($OUT/marks.txt; tools/dev/power-ways.py SMI
# MARKS digests them); then moe-ht at world $n, 4,096 tokens, BF16, NCCL beside.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
(nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader \
  -lms 50 | while IFS= read -r l; do echo "$EPOCHREALTIME, $l"; done >$OUT/smi.txt 2>&1 &)
for T in 4096 16384; do
  for w in distinct shared; do
    for ranks in 1 $n; do
      echo "== $w $T world $ranks" >>$OUT/marks.txt
      t0=$SECONDS
      SY_BENCH_LAYER_MARKS=$OUT/marks.txt timeout 240 /tmp/x/bin/syrun -n $ranks /tmp/x/bin/sy-bench --no-nccl \
        --recv arena --expert-weights $w --tokens $T --json $OUT/layer_${w}_${T}_w$ranks.json layer >/tmp/layer.txt 2>&1
      echo "== layer $w $T tokens world $ranks rc=$? ($((SECONDS - t0)) s)" >>$s
      grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|off the|of which|target|GPU slowdowns|WARN|rror" \
        /tmp/layer.txt | sed 's/\[rank 0\]//' | head -40 >>$s
    done
  done
done
pkill -f "nvidia-smi --query-gpu"
timeout 150 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --recv arena --tokens 4096 --wire bf16 --json $OUT/ht.json \
  moe-ht >/tmp/ht.txt 2>&1
echo "== moe-ht world $n rc=$?" >>$s
grep -vE "^\s*$|^\[rank [1-9]" /tmp/ht.txt | tail -14 >>$s
nvidia-smi -q -d PERFORMANCE | grep -E "SW Power Capping|Thermal Slowdown" >>$s
cat $s
