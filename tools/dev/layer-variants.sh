export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
tools/build.sh > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
B=build/bin
r() { n=$1; shift; echo "== $n: $*" >> $OUT/s.txt; timeout 200 "$@" > $OUT/$n.txt 2>&1; echo "rc=$?" >> $OUT/s.txt; grep -E "^\[rank 0\] +(decode|prefill|backward)|target|busiest|WRONG|wrong|FAIL|error" $OUT/$n.txt >> $OUT/s.txt; }
r l2 $B/syrun -n 1 $B/sy-bench --no-nccl --json $OUT/bench_layer.n1.json layer
r l4 $B/syrun -n 1 $B/sy-bench --no-nccl --micro-batches 4 --tokens 4096 layer
r l2s8 $B/syrun -n 1 $B/sy-bench --no-nccl --num-sms 8 --tokens 4096 layer
SY_BENCH_NO_CUPTI=1 r dnocupti $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 128 layer
SY_PDL=0 r dnopdl $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 128 layer
r sh3 $B/syrun -n 3 --gpus 0,0,0 $B/sy-bench --no-nccl -n 2 -w 1 --micro-batches 3 --tokens 128,512 layer
cat $OUT/s.txt
