#!/usr/bin/env bash
# x1-faults54.sh — run 54's second one-GPU call (~7 minutes), this tree:
#  1. test_gpu_faults with its three new high-throughput MoE scenarios (a rank SIGKILLed with the dispatch in
#     flight, between the dispatch and the combine, and before the call in the exact mode, whose layout waits on
#     the host): the survivors end with SY_ERR_TIMEOUT naming the dead rank, within the bound;
#  2. x1-put54.sh's tests: SY_HT_STG through the put path (SY_FORCE_PUT) at 3 and 2 ranks sharing the GPU, and the
#     in-kernel FP8 quantisation from world 2 (SY_HT_PREQUANT=0);
#  3. the layout's time at world 1 (moe-ht's layout row, 4,096 tokens, 16 and 132 SMs) and the decode step's host
#     time (sy-bench layer --tokens 128: way c's enqueue µs against issue 21's <= 5 µs);
#  4. x1-power54.sh: the SM clock and power under ways s and b.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree, smi_start, smi_digest, layer_marked
dev_start summary.txt
build_tree /tmp/h . ""
cmake --build /tmp/h -j 10 --target test_gpu_faults >/tmp/build_f.log 2>&1 || { echo "build faults failed" >>$s; tail -20 /tmp/build_f.log >>$s; }
echo "build done at $SECONDS s" >>$s
timeout 200 /tmp/h/tests/gpu/test_gpu_faults >/tmp/faults.txt 2>&1
echo "== test_gpu_faults rc=$? at $SECONDS s" >>$s
grep -E "^\[faults\]|FAIL" /tmp/faults.txt | head -20 >>$s
test_ht /tmp/h put3 3 "--gpus 0,0,0" SY_FORCE_PUT=1
test_ht /tmp/h put3b 3 "--gpus 0,0,0" SY_FORCE_PUT=1 SY_HT_ROLES=0
test_ht /tmp/h put2 2 "--gpus 0,0" SY_FORCE_PUT=1 SY_HT_PREQUANT=0
test_ht /tmp/h ink3 3 "--gpus 0,0,0" SY_HT_PREQUANT=0
grep -E "wrong|FAIL|differ|rror" /tmp/t_put3.txt /tmp/t_put3b.txt /tmp/t_put2.txt /tmp/t_ink3.txt | head -12 >>$s
for sms in 16 132; do
  bench_tree /tmp/h "bf16 $sms" 1 "layout|dispatch|combine" --tokens 4096 --num-sms $sms --wire bf16
done
timeout 100 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --tokens 128 --settle 0 layer >/tmp/dec.txt 2>&1
echo "== layer decode 128 rc=$? at $SECONDS s" >>$s
grep -E "decode|target|correct|wrong|rror" /tmp/dec.txt | sed 's/\[rank 0\]//' | head -16 >>$s
export SY_HEAP_SIZE=24G
ln -sfn /tmp/h /tmp/x
smi_start /tmp/smi.txt
layer_marked "1,5,5,3 ends 132" --tokens 4096 --split experts --end-sms 132 --micro-batches 1,5,5,3 -n 20 -w 2 -c 0 \
  --ways comm,compute,gemms,s,b,s,b
[ $SECONDS -lt 440 ] && layer_marked "16384 tokens" --tokens 16384 --split experts --end-sms 132 \
  --micro-batches 1,5,5,3 -n 8 -w 2 -c 0 --ways compute,s,b,s,b
smi_digest /tmp/smi.txt /tmp/marks.txt
cat $s
