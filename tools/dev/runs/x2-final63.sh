#!/usr/bin/env bash
# x2-final63.sh — run 63, call 6 (two GPUs, ~5 minutes): the review's fixes (9cb3d38 → HEAD) on the GPU:
# (1) test_gpu_moe_ht at 2 ranks with SY_HT_PULL_SMS=4 (the new given-FP8 budget case pulls at 4 SMs and pushes at
#     12 in turn), with SY_HT_PULL=0 (SY_HT_PULL_SMS's disagreement no longer compared there), by default;
# (2) auto's fallback: the NVSHMEM heap set below the pull's workspace (NVSHMEM_SYMMETRIC_SIZE=80M; the pulled
#     workspace 84.7 MiB, the pushed 28.3 at 4,096 tokens, world 2) while SY_HEAP_SIZE says 1 GiB: the create should
#     push, not fail;
# (3) test_gpu_moe_ht at 3 ranks sharing GPU 0 with SY_HT_PULL_SMS=4; the Python package's tests at 2 ranks.
. tools/dev/variant.sh
dev_start summary.txt
build_main
R=2 G=""
[ "$n" -lt 2 ] && G="--gpus 0,0"
test_ht build w2.pullsms4 2 "$G" SY_HT_PULL_SMS=4
test_ht build w2.push 2 "$G" SY_HT_PULL=0
NVSHMEM_SYMMETRIC_SIZE=80M SY_DEBUG=INFO timeout 60 build/bin/syrun -n $R $G build/bin/sy-bench --no-nccl \
  --tokens 4096 --num-sms 16 --wire bf16 moe-ht >/tmp/r.txt 2>&1
echo "== heap 80M, auto rc=$?" >>$s
grep -E "dispatch (pulled|pushed)| dispatch |does not fit|rror|ERR" /tmp/r.txt | grep -v "^\[rank 1\]" | head -6 >>$s
test_ht build w2.default 2 "$G"
test_ht build w3s.pullsms4 3 "--gpus 0,0,0" SY_HT_PULL_SMS=4
GPU_CHECK_ONLY='test_python$' GPU_CHECK_SANITIZE="" GPU_CHECK_SHARED=1 GPU_CHECK_TIMEOUT=100 \
  timeout 120 tools/gpu-check.sh /tmp/gc 2 >/tmp/gc.txt 2>&1
echo "== python at 2 rc=$?" >>$s
grep -E "test_python" /tmp/gc/summary.txt >>$s
echo "end at $SECONDS s" >>$s
cat $s
