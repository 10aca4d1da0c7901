#!/usr/bin/env bash
# x1-soak56.sh — run 56, call 2 (one GPU, ~8 minutes). (a) tests/gpu/test_gpu_ht_resident (new): the layout's grid
# barriers with every SM but one held by another kernel — released under the communicator's 1 s bound (the layout
# waits and is right) and past it (SY_ERR_TIMEOUT naming the layout, no hang, the dispatch behind it writes no
# row: the failed-barrier path of run 55's review, never run before); at 2 ranks it must say "world 1 only".
# (b) The soak with the high-throughput MoE on the GPU for the first time (left out since run 21 until its kernels
# passed every GPU test): sy-bench --soak at 2 ranks sharing the GPU (180 s) and at 3 (120 s, experts that do not
# 3 a rank), every result checked against the host's expectation, memory watched.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
cmake -S . -B /tmp/m >/dev/null && cmake --build /tmp/m -j 12 --target sy-bench syrun test_gpu_ht_resident \
  >/tmp/build_m.log 2>&1 || { echo "build failed" >>$s; tail -20 /tmp/build_m.log >>$s; }
echo "build done at $SECONDS s" >>$s
timeout 60 /tmp/m/bin/syrun -n 1 /tmp/m/tests/gpu/test_gpu_ht_resident >/tmp/t_res1.txt 2>&1
echo "== test_gpu_ht_resident, 1 rank rc=$?" >>$s
cut -c1-400 /tmp/t_res1.txt | grep -v "^$" | tail -12 >>$s
timeout 60 /tmp/m/bin/syrun -n 2 --gpus 0,0 /tmp/m/tests/gpu/test_gpu_ht_resident >/tmp/t_res2.txt 2>&1
echo "== test_gpu_ht_resident, 2 ranks rc=$?" >>$s
tail -3 /tmp/t_res2.txt | cut -c1-300 >>$s
for nt in "2 180" "3 120"; do
  set -- $nt
  t0=$SECONDS
  g="0$(printf ',0%.0s' $(seq 2 $1))"
  timeout $(($2 + 120)) /tmp/m/bin/syrun -n $1 --gpus $g \
    /tmp/m/bin/sy-bench --soak $2 --json $OUT/soak.n$1.json >/tmp/soak$1.txt 2>&1
  echo "== soak, $1 ranks sharing the GPU, $2 s rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] # (soak|  *[0-9.]+ s:)" /tmp/soak$1.txt | tail -8 | cut -c1-400 >>$s
  grep -iE "wrong|error|fail" /tmp/soak$1.txt | grep -v "wrong 0\|wrong elements 0" | head -5 | cut -c1-300 >>$s
done
echo "end at $SECONDS s" >>$s
cat $s
