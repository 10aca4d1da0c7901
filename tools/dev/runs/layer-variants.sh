export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
tools/build.sh >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
B=build/bin
r() { n=$1; shift; echo "== $n: $*" >>$OUT/s.txt; timeout 200 "$@" >$OUT/$n.txt 2>&1; echo "rc=$?" >>$OUT/s.txt
  grep -E "^\[rank 0\] +(decode|prefill|backward)|target|busiest|WRONG|wrong|FAIL|error" $OUT/$n.txt >>$OUT/s.txt; }
r g0 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 4096 --gemm-sms 0 layer
r g0m3 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 4096 --gemm-sms 0 --micro-batches 3 layer
r g0s24 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 4096 --gemm-sms 0 --num-sms 24 layer
SY_BENCH_TIMELINE=$OUT/tlg0.txt r tg0 $B/syrun -n 1 $B/sy-bench --no-nccl -n 3 -w 2 --tokens 4096 --gemm-sms 0 layer
SY_PDL=0 r dnopdl $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 128 layer
cat $OUT/s.txt
