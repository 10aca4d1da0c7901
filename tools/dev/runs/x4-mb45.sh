#!/usr/bin/env bash
# x4-mb45.sh — run 45: the layer's micro-batches at world 4 (issue 21: exposed communication in way c), with the new
# way `gemms` (the micro-batches' GEMMs alone on the SMs the communication leaves: what b and c cannot go below) —
# 2, 4 and 8 even micro-batches and shares by weight (1,3,3,1: the exposed first dispatch and last combine small)
# at 16,384 and 8,192 tokens; and the Python package's cuda communicators over process subgroups
# (test_process_group.py: test_subgroups_cuda; NCCL's process group at 4 GPUs, gloo with the four on GPU 0).
# $OUT/layer_*.json, $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, dev_start, layer_mb
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
for pg in "" "CUDA_VISIBLE_DEVICES=0"; do
  env $pg PYTHONPATH=/tmp/x/python timeout 150 python3 -m pytest tests/python/test_process_group.py -q -rs \
    -p no:cacheprovider >/tmp/pg.txt 2>&1
  echo "== test_process_group ${pg:-4 GPUs} rc=$?" >>$s
  tail -15 /tmp/pg.txt >>$s
done
layer() { layer_mb "$@" -n 10 -w 3; }
layer 16384 2 16k_2
layer 16384 1,3,3,1 16k_1331
layer 16384 4 16k_4
layer 16384 8 16k_8
layer 8192 1,3,3,1 8k_1331
layer 16384 1,2,2,2,2,1 16k_122221
cat $s
