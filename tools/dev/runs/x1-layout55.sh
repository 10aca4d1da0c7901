#!/usr/bin/env bash
# x1-layout55.sh — run 55's second one-GPU call (~8 minutes). The layout as one kernel (sy_ht_layout, layout.cu:
# zero | count | prefix + pos beside the exchange on its own block, grid barriers by a counter in ht_local, the next
# kernel let launch after the last phase) where it was five kernels under PDL (runs 46-54; issue 19 asks for one,
# and the five's successors waited resident beside them, up to twice the SM budget). Also: the first bad expert id
# in (token, k) order reported, as the host backend does (was: whichever thread won), and a test case of 8,208
# experts (the count's tallies past shared memory, in global memory: never run on a GPU). n = this tree, h = this
# tree with tools/dev/patches/layout-one.patch reversed (the five kernels). Predicted: at 16 SMs the layout ~24-27
# -> ~18-22 us (three kernel boundaries gone, the exchange's ~7.6 us beside prefix and pos); at 132 SMs less
# (barriers among more blocks). Tests (n): 1 rank, 3 and 4 sharing the GPU, the put path at 3, SY_PDL=0 at 1, the
# fault scenarios (a rank killed in the high-throughput MoE's calls, the exact mode's host wait); the layout row
# h n n h at 16 and 132 SMs; the layer (graphs, expert groups) checked at 4,096 tokens.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree
dev_start summary.txt
mkdir -p /tmp/hb && tar --exclude=./build -cf - . | tar -xf - -C /tmp/hb
(cd /tmp/hb && patch -R -p1 <tools/dev/patches/layout-one.patch >/dev/null) || echo "reverse patch failed" >>$s
build_tree /tmp/n . ""
cmake --build /tmp/n -j 10 --target test_gpu_faults >/tmp/build_f.log 2>&1 || echo "build faults failed" >>$s
build_tree /tmp/h /tmp/hb ""
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/n w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w3 3 "--gpus 0,0,0"
test_ht /tmp/n w4 4 "--gpus 0,0,0,0"
test_ht /tmp/n put3 3 "--gpus 0,0,0" SY_FORCE_PUT=1
test_ht /tmp/n pdl0 1 "" SY_PDL=0
grep -E "wrong|WRONG|FAIL|differ|rror|8208|first bad" /tmp/t_w1.txt /tmp/t_w3.txt /tmp/t_w4.txt /tmp/t_put3.txt \
  /tmp/t_pdl0.txt | cut -c1-200 | head -16 >>$s
echo "tests done at $SECONDS s" >>$s
for sms in 16 132; do
  for v in h n n h; do
    bench_tree /tmp/$v "layout $sms ($v)" 1 "layout" --tokens 4096 --num-sms $sms --wire bf16
  done
done
echo "bench done at $SECONDS s" >>$s
timeout 150 /tmp/n/tests/gpu/test_gpu_faults >/tmp/faults.txt 2>&1
echo "== test_gpu_faults rc=$? at $SECONDS s" >>$s
grep -E "^\[faults\]|FAIL" /tmp/faults.txt | head -20 >>$s
export SY_HEAP_SIZE=24G
if [ $SECONDS -lt 470 ]; then
  timeout 100 /tmp/n/bin/syrun -n 1 /tmp/n/bin/sy-bench --no-nccl --tokens 4096 --split experts --micro-batches \
    1,5,5,3 --end-sms 132 --settle 0 -n 5 -w 2 --ways comm,a,b,c layer >/tmp/layer.txt 2>&1
  echo "== layer 4096 (n) rc=$? at $SECONDS s" >>$s
  grep -E "prefill|backward|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -16 >>$s
fi
cat $s
