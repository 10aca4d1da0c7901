#!/usr/bin/env bash
# x2-pulldefault63.sh — run 63, call 1 (two GPUs, ~8 minutes; one GPU works too, ranks sharing it). Run 62 found the
# aligned pull faster than the push at world 2 everywhere measured; SY_HT_PULL now defaults to auto (-1: pull where
# every rank reaches every peer by load/store and the heap holds it). Here, on the new default:
# (1) gpu-check at 2 ranks (2 GPUs, or sharing GPU 0): test_gpu_moe_ht (default = pulled), .push, .blocks (pulled,
#     roles by blocks), .pushblocks, .put (puts: auto pushes), test_gpu_ht_resident, test_gpu_faults (a rank killed
#     mid-call: the pull's waits must time out naming it), both examples, the Python package's tests and examples;
# (2) test_gpu_moe_ht at 3 ranks sharing GPU 0 (pulled by default);
# (3) sy-bench moe-ht's header says which dispatch ran (sy_moe_ht_sizes' dispatch_pulled), at 2 ranks, default and
#     SY_HT_PULL=0.
. tools/dev/variant.sh
dev_start summary.txt
build_main
R=2 G=""
[ "$n" -lt 2 ] && G="--gpus 0,0"
GPU_CHECK_ONLY='test_gpu_moe_ht(\.push|\.blocks|\.pushblocks|\.put)?$|test_gpu_ht_resident|test_gpu_faults|test_example|test_python' \
  GPU_CHECK_SANITIZE="" GPU_CHECK_SHARED=1 GPU_CHECK_TIMEOUT=150 tools/gpu-check.sh /tmp/gc 2 >/tmp/gc.txt 2>&1
echo "== gpu-check at 2 rc=$? ($SECONDS s)" >>$s
tail -32 /tmp/gc/summary.txt >>$s
cp /tmp/gc/logs.tar.gz $OUT/ 2>/dev/null
test_ht build w3s.default 3 "--gpus 0,0,0"
for p in "" 0; do
  SY_HT_PULL=$p timeout 100 build/bin/syrun -n $R $G build/bin/sy-bench --no-nccl --tokens 4096 --num-sms 16 \
    --wire bf16 moe-ht >/tmp/r.txt 2>&1
  echo "== moe-ht SY_HT_PULL='$p' rc=$?" >>$s
  grep -E "dispatch (pulled|pushed)| dispatch " /tmp/r.txt | sed 's/\[rank 0\]//' | grep -v "^\[rank" | head -4 >>$s
done
echo "end at $SECONDS s" >>$s
cat $s
