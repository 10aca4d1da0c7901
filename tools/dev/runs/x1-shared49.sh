#!/usr/bin/env bash
# x1-shared49.sh — run 49, call 6: the expert groups by weight checked with 3 ranks sharing GPU 0 (512 tokens, as
# gpu-check's smoke runs) and at world 1 (4,096 tokens), each way's output poisoned first. Output: $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_tree /tmp/x . ""
chk() { # chk NAME SYRUN_ARGS.. -- BENCH_ARGS..
  local name=$1 t0=$SECONDS a=()
  shift
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  timeout 200 /tmp/x/bin/syrun "${a[@]}" /tmp/x/bin/sy-bench --no-nccl -n 2 -w 1 --settle 0 --split experts "$@" \
    layer >/tmp/layer.txt 2>&1
  echo "== $name: ${a[*]} -- $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|WRONG|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' >>$s
}
chk shared3_121 -n 3 --gpus 0,0,0 -- --tokens 512 --micro-batches 1,2,1
chk shared3_g3 -n 3 --gpus 0,0,0 -- --tokens 512 --micro-batches 3 --layers 2
chk w1_1441 -n 1 -- --tokens 4096 --micro-batches 1,4,4,1
cat $s
