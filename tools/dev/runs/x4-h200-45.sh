#!/usr/bin/env bash
# x4-h200-45.sh — run 45, call 9: issue 19's world-4 table on its target machine (4 x H200, lent for the first time
# since run 38) with today's code: moe-ht BF16 at 4,096 tokens a rank, 16 SMs, recv in the receive arena, NCCL
# beside. Lean: only sy-bench and syrun built (the device budget had ~4 minutes left). $OUT/ht.json.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt
nvidia-smi -L | head -1 >>$s
nvidia-smi --query-gpu=index,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >>$s
cmake -S . -B /tmp/x >/dev/null && cmake --build /tmp/x -j 16 --target sy-bench syrun >/tmp/b.log 2>&1 ||
  { tail -20 /tmp/b.log >>$s; cat $s; exit 1; }
SY_HEAP_SIZE=8G timeout 100 /tmp/x/bin/syrun -n 4 /tmp/x/bin/sy-bench --recv arena --tokens 4096 --wire bf16 --json $OUT/ht.json \
  moe-ht >/tmp/ht.txt 2>&1
echo "== moe-ht 4096 bf16 arena rc=$?" >>$s
grep -E " (dispatch|combine|combine_bwd|dispatch_bwd|layout) |target|slowdown|WARN|rror|correct" /tmp/ht.txt |
  sed 's/\[rank 0\]//' >>$s
cat $s
