#!/usr/bin/env bash
# x1-fp8div.sh — (with tools/dev/patches/fp8-fastdiv.patch applied; run 31: no faster, dropped — bench/NOTES.md)
# one device call on one GPU (issue 19's FP8 target): the kernels' FP8 quantisation by sy__fp8_div
# (a reciprocal a group, a multiply and two fused multiply-adds an element; ref/fp8.h) against the division of
# every element (a build with -DSY_FP8_PLAIN_DIVISION, the earlier code). test_gpu_fp8, test_gpu_moe and
# test_gpu_moe_ht at 1 rank and at 3 ranks sharing the GPU (default build); sy-bench moe-ht --wire fp8 at world 1,
# 4,096 tokens, 132 and 16 SMs, and moe-ll --wire fp8, both builds in alternation. $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
(cmake -S . -B /tmp/bd -DCMAKE_CUDA_FLAGS=-DSY_FP8_PLAIN_DIVISION >/dev/null &&
  cmake --build /tmp/bd -j 8 --target sy-bench syrun >/tmp/build_bd.log 2>&1 || echo "build /tmp/bd failed" >>$s) &
for t in test_gpu_fp8 test_gpu_moe test_gpu_moe_ht; do
  timeout 150 build/bin/syrun -n 1 build/tests/gpu/$t >/tmp/$t.1.txt 2>&1; echo "$t n=1 rc=$?" >>$s
  SY_TEST_SHARED_GPU=1 timeout 200 build/bin/syrun -n 3 --gpus 0,0,0 build/tests/gpu/$t >/tmp/$t.3.txt 2>&1
  echo "$t n=3 on GPU 0 rc=$?" >>$s
done
wait
run() { # NAME BUILD ARGS...
  local name=$1 b=$2
  shift 2
  timeout 100 $b/bin/syrun -n 1 $b/bin/sy-bench --no-nccl --wire fp8 "$@" >/tmp/r.txt 2>&1
  echo "== $name ($b) $* rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]" /tmp/r.txt | grep -v " bf16 " >>$s
}
for pass in 1 2; do
  run fastdiv build --tokens 4096 --num-sms 132 moe-ht
  run plaindiv /tmp/bd --tokens 4096 --num-sms 132 moe-ht
done
run fastdiv build --tokens 4096 --num-sms 16 moe-ht
run plaindiv /tmp/bd --tokens 4096 --num-sms 16 moe-ht
run fastdiv build moe-ll
run plaindiv /tmp/bd moe-ll
cat $s
