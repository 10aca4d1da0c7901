#!/usr/bin/env bash
# x2-queue.sh — one device call on two GPUs, the own-token queue and the ring size (bench/NOTES.md): builds the
# default tree and three variants (send_token inlined: SY_HT_SEND_INLINE=1; rings of 128 and 256 slots), runs
# test_gpu_moe_ht at 2 GPUs (default, put path, 256 slots), then moe-ht (4,096 tokens, SY_HT_PROBE digested):
# world 1 on GPU 0 at 16 SMs (default and inlined), world 2 at 16 SMs (default, queue off, inlined, 128 and 256
# slots; BF16 wire) and at 32 SMs (default). As run in history run 27, call 7, when send_token was out of line
# unless SY_HT_SEND_INLINE=1; since 6c66ab7 inlining it is the default, so /tmp/b-inl now builds the default again.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
T=build/tests/gpu
tools/build.sh >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
variant() { # DIR FLAG
  cmake -S . -B $1 -DCMAKE_CUDA_FLAGS="$2" -DCMAKE_C_FLAGS="$2" -DCMAKE_CXX_FLAGS="$2" >/dev/null &&
    cmake --build $1 -j 10 --target sy-bench syrun test_gpu_moe_ht >$OUT/build_$(basename $1).log 2>&1 || echo "build $1 failed" >>$OUT/summary.txt
}
variant /tmp/b-inl -DSY_HT_SEND_INLINE=1 &
variant /tmp/b-s128 -DSY_MOE_HT_RING_SLOTS=128 &
variant /tmp/b-s256 -DSY_MOE_HT_RING_SLOTS=256 &
wait
s=$OUT/summary.txt
timeout 120 build/bin/syrun -n 2 $T/test_gpu_moe_ht >$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht n=2 rc=$?" >>$s
SY_FORCE_PUT=1 timeout 120 build/bin/syrun -n 2 $T/test_gpu_moe_ht >>$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht.put n=2 rc=$?" >>$s
timeout 120 /tmp/b-s256/bin/syrun -n 2 /tmp/b-s256/tests/gpu/test_gpu_moe_ht >>$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht s256 n=2 rc=$?" >>$s
run() { # NAME BUILD RANKS SMS ENV... ; extra sy-bench args in $ARGS
  local name=$1 b=$2 n=$3 sms=$4
  shift 4
  local d=$OUT/p_$name
  mkdir -p $d
  env "$@" SY_HT_PROBE=$d/probe.%r.txt timeout 150 $b/bin/syrun -n $n $b/bin/sy-bench --tokens 4096 --num-sms $sms $ARGS \
    --json $d/ht.json moe-ht >$d/ht.txt 2>&1
  echo "== $name: world $n, $sms SMs, $b $* $ARGS rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " $d/ht.txt >>$s
  python3 tools/dev/ht-probe.py $d/probe.*.txt | grep -E "kernel|^ +0 (dispatch|combine_bwd) " >>$s 2>&1
}
ARGS="--no-nccl"
CUDA_VISIBLE_DEVICES=0 run w1def build 1 16 X=1
CUDA_VISIBLE_DEVICES=0 run w1inl /tmp/b-inl 1 16 X=1
ARGS="--wire bf16"
run w2def build 2 16 X=1
run w2noq build 2 16 SY_HT_OWN_QUEUE=0
run w2inl /tmp/b-inl 2 16 X=1
run w2s128 /tmp/b-s128 2 16 X=1
run w2s256 /tmp/b-s256 2 16 X=1
run w2s256noq /tmp/b-s256 2 16 SY_HT_OWN_QUEUE=0
ARGS="--wire bf16 --no-nccl"
run w2def32 build 2 32 X=1
run w2s256x32 /tmp/b-s256 2 32 X=1
tar czf $OUT/probes.tar.gz -C $OUT $(cd $OUT && ls -d p_*) 2>/dev/null
rm -rf $OUT/p_*
cat $s
