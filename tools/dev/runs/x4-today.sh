#!/usr/bin/env bash
# x4-today.sh PART — four-GPU calls of 2026-11-26/27, each under 600 s on one warm nvidia-h100-x4:
#   a  gpu-check of the Python package (tests, both examples) and test_gpu_moe_ht with its variants (recv pipe
#      included) at 1 and 4 ranks; then moe-ht at world 4 with SY_HT_RECV_PIPE 0 and 1, alternating, twice
#   b  what a replayed decode step's graph holds (SY_DEBUG=INFO: the capture's node census) and its host time at
#      world 1 and 4 (sy-bench layer --tokens 128); tools/dev/graph-launch-probe.cu on GPU 0; moe-ht at world 4 with
#      24 and 32 SMs (4,096 tokens, BF16); the layer at world 4 with 4 micro-batches (4,096 tokens)
#   c  after the one work queue (exec/work_queue.cuh: ticket_queue): every GPU test at 4 GPUs and 1 (gpu-check
#      '^test_', no sanitizers); the decode step's host time at world 1 with cuBLASLt's workspace 32 MiB and 0
#      (SY_BENCH_GEMM_WORKSPACE), its census; graph-launch-probe again (memsets, clusters)
#   d  the work queue on skewed loads: moe-ht at world 4, BF16, routing uniform / local / hot, SY_HT_OWN_QUEUE 1
#      and 0; alltoall and attn at world 4 with SY_PIECE_ORDER static and tickets
#   e  after the layout's memsets became one kernel and decode's GEMMs lost their workspace: test_gpu_moe_ht (and
#      its static/queue variants) at 4 GPUs and 1, pytest at 1; sy-bench layer (decode and prefill) at world 1 and 4
# $OUT/summary.txt, JSON, a few logs.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt B=build/bin
part=${1:?usage: x4-today.sh a|b|c|d|e}
if [ "$part" = a ]; then
  GPU_CHECK_ONLY='python|moe_ht' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 timeout 330 \
    tools/gpu-check.sh /tmp/g 1 4 >/tmp/gc.txt 2>&1
  echo "== gpu-check rc=$?" >>$s
  cat /tmp/g/summary.txt >>$s
  for pass in 1 2; do
    for p in 0 1; do
      SY_HT_RECV_PIPE=$p timeout 70 $B/syrun -n 4 $B/sy-bench --tokens 4096 --json $OUT/w4_p${p}_$pass.json moe-ht \
        >/tmp/w4_${p}_$pass.txt 2>&1
      echo "== world 4, pipe $p, pass $pass rc=$?" >>$s
      grep -E " (dispatch|combine|dispatch_bwd|combine_bwd) " /tmp/w4_${p}_$pass.txt >>$s
    done
  done
  tar czf $OUT/logs.tar.gz -C /tmp g/logs gc.txt w4_0_1.txt w4_1_1.txt 2>/dev/null
elif [ "$part" = b ]; then
  [ -x $B/sy-bench ] && tools/build.sh >/tmp/build.log 2>&1 || { SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }; }
  nvcc -O2 -arch=sm_90 -std=c++17 -o /tmp/glp tools/dev/graph-launch-probe.cu >/tmp/glp_build.txt 2>&1 &&
    CUDA_VISIBLE_DEVICES=0 timeout 60 /tmp/glp >$OUT/glp.txt 2>&1
  echo "== graph-launch-probe rc=$?" >>$s
  for n in 1 4; do
    SY_DEBUG=TRACE timeout 90 $B/syrun -n $n $B/sy-bench --no-nccl --tokens 128 --json $OUT/decode_w$n.json layer \
      >/tmp/dec$n.txt 2>&1
    echo "== layer decode world $n rc=$?" >>$s
    grep -E "^\[rank 0\] +decode|wrong" /tmp/dec$n.txt >>$s
    grep -E "graph captured|graph node" /tmp/dec$n.txt | sort | uniq -c | sort -rn | head -30 >>$s
  done
  for sms in 24 32; do
    timeout 80 $B/syrun -n 4 $B/sy-bench --tokens 4096 --wire bf16 --num-sms $sms --json $OUT/ht_w4_sms$sms.json \
      moe-ht >/tmp/ht$sms.txt 2>&1
    echo "== moe-ht world 4, $sms SMs rc=$?" >>$s
    grep -E " (dispatch|combine|dispatch_bwd|combine_bwd) |wrong" /tmp/ht$sms.txt >>$s
  done
  timeout 150 $B/syrun -n 4 $B/sy-bench --no-nccl --tokens 4096 --micro-batches 4 --json $OUT/layer_w4_mb4.json layer \
    >/tmp/l4.txt 2>&1
  echo "== layer world 4, 4 micro-batches rc=$?" >>$s
  grep -E "^\[rank 0\]" /tmp/l4.txt | grep -vE "^\[rank 0\] # *$" | tail -20 >>$s
  tar czf $OUT/logs.tar.gz -C /tmp dec1.txt dec4.txt ht24.txt ht32.txt l4.txt build.log 2>/dev/null
elif [ "$part" = c ]; then
  GPU_CHECK_ONLY='^test_' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=120 timeout 420 tools/gpu-check.sh /tmp/g 4 1 \
    >/tmp/gc.txt 2>&1
  echo "== gpu-check rc=$?" >>$s
  cat /tmp/g/summary.txt >>$s
  cp /tmp/g/logs.tar.gz $OUT/gc_logs.tar.gz 2>/dev/null
  nvcc -O2 -arch=sm_90 -std=c++17 -o /tmp/glp tools/dev/graph-launch-probe.cu >/tmp/glp_build.txt 2>&1 &&
    CUDA_VISIBLE_DEVICES=0 timeout 60 /tmp/glp >$OUT/glp.txt 2>&1
  echo "== graph-launch-probe rc=$?" >>$s
  for ws in 32 0 32 0; do
    SY_BENCH_GEMM_WORKSPACE=$ws SY_DEBUG=INFO CUDA_VISIBLE_DEVICES=0 timeout 60 $B/syrun -n 1 $B/sy-bench --no-nccl \
      --tokens 128 layer >/tmp/dec.txt 2>&1
    echo "== layer decode world 1, cuBLASLt workspace $ws MiB rc=$?" >>$s
    grep -E "^\[rank 0\] +decode|wrong|graph captured" /tmp/dec.txt >>$s
  done
elif [ "$part" = d ]; then
  [ -x $B/sy-bench ] || { tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }; }
  GPU_CHECK_ONLY='^test_(python_|gpu_faults)' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=90 timeout 150 \
    tools/gpu-check.sh /tmp/g1 1 >/tmp/gc1.txt 2>&1
  echo "== gpu-check (python, faults) at 1 rank rc=$?" >>$s
  grep -E "^test_" /tmp/g1/summary.txt >>$s
  for ws in 0 32; do
    SY_BENCH_GEMM_WORKSPACE=$ws timeout 60 $B/syrun -n 4 $B/sy-bench --no-nccl --tokens 128 \
      --json $OUT/decode_w4_ws$ws.json layer >/tmp/dec.txt 2>&1
    echo "== layer decode world 4, cuBLASLt workspace $ws MiB rc=$?" >>$s
    grep -E "^\[rank 0\] +decode|wrong" /tmp/dec.txt >>$s
  done
  for routing in uniform local hot; do
    for q in 1 0; do
      SY_HT_OWN_QUEUE=$q timeout 60 $B/syrun -n 4 $B/sy-bench --tokens 4096 --wire bf16 --routing $routing \
        --json $OUT/skew_${routing}_q$q.json moe-ht >/tmp/sk.txt 2>&1
      echo "== moe-ht world 4, routing $routing, queue $q, rc=$?" >>$s
      grep -E " (dispatch|combine_bwd) |wrong" /tmp/sk.txt >>$s
    done
  done
  for order in static tickets; do
    for e in alltoall attn; do
      a="-e 64M"; [ $e = attn ] && a="-T 65536"
      SY_PIECE_ORDER=$order timeout 80 $B/syrun -n 4 $B/sy-bench $a --json $OUT/${e}_$order.json $e >/tmp/$e.txt 2>&1
      echo "== $e world 4, pieces $order, rc=$?" >>$s
      grep -vE "^\[rank 0\] # *$" /tmp/$e.txt | grep -E "^\[rank 0\] +[0-9]|wrong" | tail -12 >>$s
    done
  done
elif [ "$part" = e ]; then
  GPU_CHECK_ONLY='^test_(gpu_moe_ht|python$|example_layer)' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=90 timeout 260 \
    tools/gpu-check.sh /tmp/g 4 1 >/tmp/gc.txt 2>&1
  echo "== gpu-check rc=$?" >>$s
  grep -E "^(build|test_)" /tmp/g/summary.txt >>$s
  CUDA_VISIBLE_DEVICES=0 timeout 100 $B/syrun -n 1 $B/sy-bench --no-nccl --json $OUT/layer_w1.json layer >/tmp/l1.txt 2>&1
  echo "== layer world 1 rc=$?" >>$s
  grep -E "^\[rank 0\] +(decode|prefill|backward)|wrong|correct" /tmp/l1.txt >>$s
  timeout 120 $B/syrun -n 4 $B/sy-bench --no-nccl --json $OUT/layer_w4.json layer >/tmp/l4.txt 2>&1
  echo "== layer world 4 rc=$?" >>$s
  grep -E "^\[rank 0\] +(decode|prefill|backward)|wrong|correct" /tmp/l4.txt >>$s
fi
cat $s
