#!/usr/bin/env bash
# x1-sms47.sh — run 47, call 2 (only one-GPU machines were lent by then; x2-sms47.sh is the same at world 2): the
# layer's communication SM budget (sy-bench --num-sms: the moe-ht object's config.num_sms; the micro-batches' GEMMs told
# the rest, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET) at 16, 8, 12, 24, 32, 16, world 1: 4,096 tokens with shared weights,
# one layer (issue 21's world-1 target's shape), and 16,384 tokens with each expert's weights, one layer. Fewer SMs give
# the GEMMs more and leave the step's two ends slower; more the reverse. Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
mkdir -p /tmp/j
run() { # TOKENS SMS [ARGS...]
  local t=$1 m=$2 t0=$SECONDS
  shift 2
  timeout 200 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --no-nccl --recv arena --tokens $t --num-sms $m "$@" \
    --json /tmp/j/layer_$((++k))_${t}_sms$m.json layer >/tmp/layer.txt 2>&1
  echo "== layer world 1 tokens $t num-sms $m $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|off the|of which|exposed|hides|GPU slowdowns|WARN|rror" \
    /tmp/layer.txt | sed 's/\[rank 0\]//' | head -40 >>$s
}
for m in 16 8 12 24 32 16; do run 4096 $m --expert-weights shared; done
for m in 16 8 12 24 32 16; do run 16384 $m; done
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
