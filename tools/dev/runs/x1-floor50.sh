#!/usr/bin/env bash
# x1-floor50.sh — run 50, call 1: where the per-call floor of the high-throughput dispatch and combine comes from (run
# 49's timeline: a layer group's dispatch 182 µs for 7% of the rows, 299 for 25%, at 16 SMs, world 1). moe-ht (BF16,
# 16 SMs, recv in the arena, kernel time) at world 1: (1) 4,096 tokens with each rank's first share of experts kept
# (--keep-experts 1, 0.5, 0.25, 0.0704 = 18 of 256); (2) all experts at 288, 1,024 and 2,048 tokens (288 ≈ 7% of
# 4,096: the same rows as keep 0.0704, fewer tokens); (3) SY_HT_PROBE of keep 0.0704 (where each block's span goes);
# (4) Nsight Compute (full set) on the dispatch and the combine at keep 0.0704. Output: $OUT/summary.txt, $OUT/ncu/.
. tools/dev/variant.sh # build_tree, dev_start, probe_tree
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
run1() { # run1 LABEL ARGS...
  local t0=$SECONDS label=$1
  shift
  timeout 60 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --no-nccl -c 0 --wire bf16 --recv arena "$@" moe-ht \
    >/tmp/r.txt 2>&1
  echo "== $label rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +[0-9]+ |exact layout|rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for share in 1 0.5 0.25 0.0704; do run1 "4096 tokens, keep $share" --tokens 4096 --keep-experts $share; done
for t in 288 1024 2048; do run1 "$t tokens, keep 1" --tokens $t; done
probe_tree /tmp/x "world 1, 4096 tokens, keep 0.0704" 1 --tokens 4096 --wire bf16 --recv arena --keep-experts 0.0704
probe_tree /tmp/x "world 1, 288 tokens, keep 1" 1 --tokens 288 --wire bf16 --recv arena
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p $OUT/ncu
for k in sy_ht_dispatch sy_ht_combine; do
  timeout 240 /tmp/x/bin/syrun -n 1 "$ncu" --set full --import-source yes --cache-control none --clock-control none \
    -k "regex:^$k" -s 4 -c 1 -f -o /tmp/$k /tmp/x/bin/sy-bench --no-nccl -n 2 -w 3 --tokens 4096 --wire bf16 \
    --recv arena --keep-experts 0.0704 moe-ht >/tmp/$k.log 2>&1 || tail -5 /tmp/$k.log >>$s
  "$ncu" -i /tmp/$k.ncu-rep --page details >$OUT/ncu/$k.txt 2>&1
  "$ncu" -i /tmp/$k.ncu-rep --page source --csv --print-source sass >$OUT/ncu/$k.sass.csv 2>/dev/null
  cp /tmp/$k.ncu-rep $OUT/ncu/ 2>/dev/null
  echo "== ncu $k" >>$s
  grep -E "Duration|Memory Throughput|DRAM Throughput|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|Block Size" \
    $OUT/ncu/$k.txt >>$s
done
cat $s
