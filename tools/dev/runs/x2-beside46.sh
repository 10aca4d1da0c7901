#!/usr/bin/env bash
# x2-beside46.sh — run 46, call 3: each micro-batch's GEMMs in two parts (--gemm-beside F: the first F of its experts
# on the SMs the communication leaves, beside it; the rest on every SM once that communication has ended) against
# all of them beside it (F = 1, as before); sy-bench layer at 16,384 tokens, each expert's own weights, world $n and
# world 1 (GPU 0), micro-batches 2 and 1,3,3,1. Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
mkdir -p /tmp/j
run() { # RANKS MB F
  local t0=$SECONDS
  timeout 200 /tmp/x/bin/syrun -n $1 /tmp/x/bin/sy-bench --no-nccl --recv arena --tokens 16384 --micro-batches $2 \
    --gemm-beside $3 --json /tmp/j/layer_w$1_mb$2_f$3.json layer >/tmp/layer.txt 2>&1
  echo "== layer 16384 world $1 micro-batches $2 beside $3 rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|off the|of which|exposed|GPU slowdowns|WARN|rror" \
    /tmp/layer.txt | sed 's/\[rank 0\]//' | head -40 >>$s
}
run $n 2 1
run $n 2 0.3
run $n 2 0.5
run $n 1,3,3,1 1
run $n 1,3,3,1 0.4
run 1 2 1
run 1 2 0.3
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
