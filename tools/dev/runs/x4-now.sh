#!/usr/bin/env bash
# x4-now.sh PART — four-GPU calls of 2026-11-26 (late), each under 600 s on one warm nvidia-h100-x4:
#   a  build; test_gpu_moe_ht at 4 GPUs with the own-token queue by default, off and forced on, and at 1 rank;
#      moe-ht at world 4 (4,096 and 8,192 tokens, 16 SMs, both wires, forward and backward, NCCL beside it, the
#      per-block probe of the last call); sy-bench layer at world 4 (decode 128 and prefill 4,096 tokens)
#   b  the Python package: pip install . beside compute-sanitizer racecheck and synccheck of test_gpu_moe_ht (queue
#      on) on GPU 0; then pytest at 4 ranks and at 1 rank
#   p  the Python package again after its fix (below), without the sanitizers
#   q  SY_HT_OWN_QUEUE=2 against 1 at world 4 and 2, then p
#   c  every GPU test at 2 and 4 GPUs (gpu-check, no sanitizers)
# $OUT/summary.txt, JSON, a few logs.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt B=build/bin T=build/tests/gpu/test_gpu_moe_ht
part=${1:?usage: x4-now.sh a|b|p|q|c}
if [ "$part" = a ]; then
  t0=$(date +%s)
  tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
  echo "build $(($(date +%s) - t0)) s" >>$s
  for q in -1 0 1; do
    SY_HT_OWN_QUEUE=$q timeout 90 $B/syrun -n 4 $T >>/tmp/t.txt 2>&1; echo "test_gpu_moe_ht n=4 queue=$q rc=$?" >>$s
  done
  timeout 60 $B/syrun -n 1 $T >>/tmp/t.txt 2>&1; echo "test_gpu_moe_ht n=1 rc=$?" >>$s
  mkdir -p /tmp/p4
  t0=$(date +%s)
  SY_HT_PROBE=/tmp/p4/probe.%r.txt timeout 220 $B/syrun -n 4 $B/sy-bench --json $OUT/ht_w4.json moe-ht >/tmp/ht4.txt 2>&1
  echo "== moe-ht world 4, 16 SMs rc=$? ($(($(date +%s) - t0)) s)" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd|layout) |target|wrong" /tmp/ht4.txt >>$s
  python3 tools/dev/ht-probe.py /tmp/p4/probe.*.txt >>$s 2>&1
  t0=$(date +%s)
  timeout 150 $B/syrun -n 4 $B/sy-bench --json $OUT/layer_w4.json layer >/tmp/layer4.txt 2>&1
  echo "== layer world 4 rc=$? ($(($(date +%s) - t0)) s)" >>$s
  grep -E "^\[rank 0\]|^#" /tmp/layer4.txt | grep -vE "^# *$" | tail -40 >>$s
  cp /tmp/ht4.txt /tmp/layer4.txt $OUT/
  tar czf $OUT/logs.tar.gz -C /tmp t.txt p4 build.log
elif [ "$part" = b ]; then
  # the GPU machine reaches no registry: the wheel built here (pip wheel . --no-deps -w build/wheel, in a venv with
  # torch 2.11 and NVSHMEM 3.4.5, the machine's pair) travels with the call (carry build/wheel)
  [ -x $B/syrun ] || tools/build.sh >/tmp/build.log 2>&1
  (python3 -m pip install --quiet --no-deps --no-index build/wheel/*.whl >/tmp/pip.log 2>&1; echo "== pip install wheel rc=$?" >>$s) &
  for tool in ${SANITIZE-racecheck synccheck}; do
    SY_HT_OWN_QUEUE=1 CUDA_VISIBLE_DEVICES=0 timeout 150 $B/syrun -n 1 /usr/local/cuda/bin/compute-sanitizer --tool $tool \
      --error-exitcode 9 $T >/tmp/san_$tool.txt 2>&1
    echo "compute-sanitizer $tool test_gpu_moe_ht (queue on) rc=$?" >>$s
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" /tmp/san_$tool.txt | tail -3 >>$s
  done
  wait
  timeout 180 $B/syrun -n 4 python3 -m pytest tests/python -q -p no:cacheprovider >$OUT/py4.txt 2>&1
  echo "== pytest 4 ranks rc=$?" >>$s
  grep -E "passed|failed|error" $OUT/py4.txt | tail -8 >>$s
  timeout 120 $B/syrun -n 1 python3 -m pytest tests/python -q -p no:cacheprovider >$OUT/py1.txt 2>&1
  echo "== pytest 1 rank rc=$?" >>$s
  tail -3 $OUT/py1.txt >>$s
  for ex in moe_layer cp_attention; do
    timeout 60 $B/syrun -n 4 python3 examples/$ex.py >/tmp/ex_$ex.txt 2>&1
    echo "== examples/$ex.py 4 ranks rc=$?" >>$s; tail -4 /tmp/ex_$ex.txt >>$s
  done
  tar czf $OUT/logs.tar.gz -C /tmp san_racecheck.txt san_synccheck.txt pip.log ex_moe_layer.txt ex_cp_attention.txt
elif [ "$part" = p ]; then
  # the Python package again: the wheel of call b, its Python files replaced by the checkout's (the library is the
  # same; the package now marks the tensors of each call as in use by the call's stream), the examples at 4 and 1
  # ranks, the tests at 4 ranks, and the host time above the C calls (tools/dev/py-overhead.py)
  [ -x $B/syrun ] || tools/build.sh >/tmp/build.log 2>&1
  python3 -m pip install --quiet --no-deps --no-index --force-reinstall build/wheel/*.whl >/tmp/pip.log 2>&1
  echo "== pip install wheel rc=$?" >>$s
  dir=$(python3 -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('switchyard').origin))")
  cp python/switchyard/*.py "$dir"/ && echo "package files from the checkout into $dir" >>$s
  for n in 4 1; do
    for ex in moe_layer cp_attention; do
      timeout 60 $B/syrun -n $n python3 examples/$ex.py >/tmp/ex_${ex}_$n.txt 2>&1
      echo "== examples/$ex.py $n ranks rc=$?" >>$s; grep -c PASS /tmp/ex_${ex}_$n.txt >>$s; grep FAIL /tmp/ex_${ex}_$n.txt >>$s
    done
  done
  timeout 150 $B/syrun -n 4 python3 -m pytest tests/python -q -p no:cacheprovider >$OUT/py4.txt 2>&1
  echo "== pytest 4 ranks rc=$?" >>$s
  grep -E "passed|failed|error" $OUT/py4.txt | tail -8 >>$s
  CUDA_VISIBLE_DEVICES=0 timeout 90 python3 tools/dev/py-overhead.py >$OUT/overhead.txt 2>&1
  echo "== py-overhead rc=$?" >>$s
  tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls ex_*_[14].txt) pip.log
elif [ "$part" = q ]; then
  # SY_HT_OWN_QUEUE=2 (receivers take own rows only at their end) against 1, at world 4 and 2 (4,096 tokens, 16
  # SMs, no probe), test_gpu_moe_ht with 2; then part p's Python run with the new stream-mark test
  t0=$(date +%s)
  tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
  echo "build $(($(date +%s) - t0)) s" >>$s
  SY_HT_OWN_QUEUE=2 timeout 90 $B/syrun -n 4 $T >>/tmp/t.txt 2>&1; echo "test_gpu_moe_ht n=4 queue=2 rc=$?" >>$s
  SY_HT_OWN_QUEUE=2 timeout 60 $B/syrun -n 1 $T >>/tmp/t.txt 2>&1; echo "test_gpu_moe_ht n=1 queue=2 rc=$?" >>$s
  for n in 4 2; do
    for q in 1 2 1 2; do
      SY_HT_OWN_QUEUE=$q CUDA_VISIBLE_DEVICES=$([ $n = 4 ] && echo 0,1,2,3 || echo 0,1) timeout 100 $B/syrun -n $n \
        $B/sy-bench --tokens 4096 --json $OUT/q${q}_w$n.json moe-ht >/tmp/q${q}_w$n.txt 2>&1
      echo "== moe-ht world $n queue $q rc=$?" >>$s
      grep -E " (dispatch|combine_bwd) " /tmp/q${q}_w$n.txt >>$s
    done
  done
  exec bash "$0" p
else
  GPU_CHECK_ONLY='^test_' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=120 tools/gpu-check.sh /tmp/g 2 4 >$OUT/gc.txt 2>&1
  cp /tmp/g/summary.txt $OUT/gc_summary.txt
  tar czf $OUT/logs.tar.gz -C /tmp/g logs
fi
cat $s
