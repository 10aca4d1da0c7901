#!/usr/bin/env bash
# x2-pdl46.sh — run 46, call 6: the high-throughput MoE's long kernels (dispatch, combine, quantisation) no longer
# trigger their stream's next kernel at their start (pdl_wait), and the layout's kernels stay within the SM budget
# (call 5's timeline: a layout's 129 blocks, launched early behind a combine, held the expert GEMMs back for the
# combine's whole run). Tests (test_gpu_moe_ht at world $n, and 3 ranks sharing GPU 0), the layer at world $n (16,384
# tokens; 4 layers with --gemm-beside 1 and 0.3, 1 layer), the moe-ht table at world $n with NCCL beside.
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . "" &
build_tree /tmp/o ab/old "" & # the code before (carry ab/old: tools/dev/ab.sh tree 2397713~1 old)
wait
test_ht /tmp/x w$n $n ""
test_ht /tmp/x shared3 3 "--gpus 0,0,0"
grep -E "FAIL|wrong|rror" /tmp/t_w$n.txt /tmp/t_shared3.txt | head -10 >>$s
mkdir -p /tmp/j
run() { # [o] TOKENS LAYERS F [ARGS...] (o: the code before)
  local d=/tmp/x
  [ "$1" = o ] && d=/tmp/o && shift
  local t=$1 l=$2 f=$3 t0=$SECONDS
  shift 3
  timeout 200 $d/bin/syrun -n $n $d/bin/sy-bench --no-nccl --recv arena --tokens $t --layers $l \
    --gemm-beside $f "$@" --json /tmp/j/layer_$((++k))_w${n}_${t}_l${l}_f$f.json layer >/tmp/layer.txt 2>&1
  echo "== layer ($d) $t world $n layers $l beside $f $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|off the|of which|exposed|GPU slowdowns|WARN|rror" \
    /tmp/layer.txt | sed 's/\[rank 0\]//' | head -40 >>$s
}
run 16384 4 1 -n 10 -w 3
run o 16384 4 1 -n 10 -w 3
run 16384 4 0.3 -n 10 -w 3
run 16384 1 1
timeout 150 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --recv arena --tokens 4096 --wire bf16 --json /tmp/j/ht.json \
  moe-ht >/tmp/ht.txt 2>&1
echo "== moe-ht world $n rc=$?" >>$s
grep -vE "^\s*$|^\[rank [1-9]" /tmp/ht.txt | tail -9 >>$s
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
