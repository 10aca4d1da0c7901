#!/usr/bin/env bash
# x2-pullwhy61.sh — two GPUs (~5 minutes): call 3 measured pullx at world 2 (515 us at 16 SMs, the same messages and
# rows) against pull.cu's 1,020, whose warp 0 spends ~2 us a message waiting for its stores to read a stage and
# ~7 us elsewhere in the loop (issuing them): the TMA unit's ops run at half pullx's rate. Three suspects, one call:
# (1) pullx with each block's messages a contiguous range (pull.cu's order) instead of the grid-wide interleave;
# (2) -DSY_HT_PULL_OWN_DIRECT=1: own BF16 tokens read from the caller's cudaMalloc buffer, not the symmetric heap's copy
#     (the probe's own against work); (3) -DSY_HT_PULL_STORE_ONE=1: one store a message (op count against bytes).
# (Run once, run 61 call 4; the two knobs were removed after it: bench/NOTES.md run 61.)
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_main
(build_tree /tmp/od . "-DSY_HT_PULL_OWN_DIRECT=1"; echo "od built at $SECONDS s" >>$s) &
b1=$!
(build_tree /tmp/one . "-DSY_HT_PULL_STORE_ONE=1"; echo "one built at $SECONDS s" >>$s) &
b2=$!
echo "== pullx EC_CHUNK at $n GPUs" >>$s
EC_CHUNK=1 timeout 100 build/bin/sy-expand-ceiling pullx >>$s 2>&1
wait $b1 $b2
pr() { # DIR LABEL
  rm -rf /tmp/probe_t && mkdir -p /tmp/probe_t
  SY_HT_PULL=1 SY_HT_PROBE=/tmp/probe_t/probe.%r.txt timeout 120 $1/bin/syrun -n $n $1/bin/sy-bench --no-nccl \
    --tokens 4096 --wire bf16 --num-sms 16 --recv arena moe-ht >/tmp/r.txt 2>&1
  echo "== $2 rc=$?" >>$s
  grep -E " dispatch " /tmp/r.txt | sed 's/\[rank 0\]//' | grep -v "^\[rank" >>$s
  python3 tools/dev/ht-probe.py --kernel dispatch /tmp/probe_t/probe.0.txt >>$s 2>&1
}
pr build "pull (probe)"
pr /tmp/od "pull, own tokens from the caller's buffer (probe)"
pr /tmp/one "pull, one store a message (probe)"
echo "end at $SECONDS s" >>$s
cat $s
