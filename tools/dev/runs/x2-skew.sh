#!/usr/bin/env bash
# x2-skew.sh — one device call on two GPUs (not run yet): the dispatch kernel's own-token queue against the static
# split on skewed routings (issue 20's measure of the work queue): moe-ht at world 2, 4,096 tokens, 16 SMs, BF16 and
# FP8, routing uniform / local (no token leaves its rank) / hot (every token to rank 0), SY_HT_OWN_QUEUE=1 and 0,
# with SY_HT_PROBE digested. Summary in $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt
tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
for routing in uniform local hot; do
  for q in 1 0; do
    d=/tmp/p_${routing}_q$q
    mkdir -p $d
    SY_HT_OWN_QUEUE=$q SY_HT_PROBE=$d/probe.%r.txt timeout 150 build/bin/syrun -n 2 build/bin/sy-bench --tokens 4096 \
      --routing $routing --json $OUT/skew_${routing}_q$q.json moe-ht >$d/ht.txt 2>&1
    echo "== routing $routing, queue $q, rc=$?" >>$s
    grep -E " (dispatch|combine_bwd) " $d/ht.txt >>$s
    python3 tools/dev/ht-probe.py $d/probe.*.txt | grep -E "kernel|dispatch " >>$s 2>&1
  done
done
cat $s
