#!/usr/bin/env bash
# x4-mprobe.sh — one short device call on 4 GPUs: where the time goes with SY_HT_MERGED=1 and without (SY_HT_PROBE,
# moe-ht at world 4, 4,096 tokens, 16 SMs, BF16 only, no NCCL), digested by tools/dev/ht-probe.py.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt B=build/bin
tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
for m in 1 0; do
  mkdir -p /tmp/p$m
  SY_HT_MERGED=$m SY_HT_PROBE=/tmp/p$m/probe.%r.txt timeout 40 $B/syrun -n 4 $B/sy-bench --no-nccl --tokens 4096 \
    --wire bf16 moe-ht >/tmp/b$m.txt 2>&1
  echo "== merged $m rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " /tmp/b$m.txt >>$s
  python3 tools/dev/ht-probe.py /tmp/p$m/probe.*.txt 2>&1 | grep -E "kernel|^ +0 " >>$s
done
cat $s
