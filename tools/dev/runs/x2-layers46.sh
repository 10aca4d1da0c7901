#!/usr/bin/env bash
# x2-layers46.sh — run 46, call 4: a step of 4 MoE layers (--layers 4: each micro-batch's next layer after its last,
# so only the step's first dispatch and last combine have nothing beside them) against 1, with the micro-batches'
# GEMMs all beside the communication (--gemm-beside 1) or split (0.5, 0.3); 16,384 tokens, each expert's own weights,
# two micro-batches, world $n; then world 1 (GPU 0) at 4,096 tokens. Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
mkdir -p /tmp/j
run() { # RANKS TOKENS LAYERS F [ARGS...]
  local r=$1 t=$2 l=$3 f=$4 t0=$SECONDS
  shift 4
  timeout 200 /tmp/x/bin/syrun -n $r /tmp/x/bin/sy-bench --no-nccl --recv arena --tokens $t --layers $l \
    --gemm-beside $f "$@" --json /tmp/j/layer_$((++k))_w${r}_${t}_l${l}_f$f.json layer >/tmp/layer.txt 2>&1
  echo "== layer $t world $r layers $l beside $f $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|off the|of which|exposed|hides|GPU slowdowns|WARN|rror" \
    /tmp/layer.txt | sed 's/\[rank 0\]//' | head -40 >>$s
}
run $n 16384 1 1
run $n 16384 4 1 -n 10 -w 3
run $n 16384 4 0.5 -n 10 -w 3
run $n 16384 4 0.3 -n 10 -w 3
run 1 4096 4 1 -n 10 -w 3
run 1 4096 4 1 -n 10 -w 3 --expert-weights shared
run 1 4096 1 1 --expert-weights shared
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
