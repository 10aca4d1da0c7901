#!/usr/bin/env bash
# x1-ncu53.sh — run 53, call 4 (1 GPU). Issue 19's FP8 dispatch at world 1, 132 SMs, 4,096 tokens (64.5-65.0% of the
# copy's rate against >= 70%): where its warps wait since run 52's pipelined quantisation — Nsight Compute's warp stall
# samples per SASS instruction (SourceCounters), summed per CUDA source line by tools/dev/ncu-lines.py where the
# device has nvdisasm (else the SASS page alone, and the line table is made elsewhere), and sy-bench's FP8 figure.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
build_tree /tmp/h . ""
echo "build done at $SECONDS s" >>$s
timeout 100 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --tokens 4096 --num-sms 132 --wire fp8 moe-ht >/tmp/b.txt 2>&1
grep -E " dispatch " /tmp/b.txt | sed 's/\[rank 0\]//' >>$s
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p $OUT/ncu
timeout 240 /tmp/h/bin/syrun -n 1 "$ncu" --section SpeedOfLight --section WarpStateStats --section SourceCounters \
  --import-source yes --cache-control none --clock-control none -k "regex:^sy_ht_dispatch" -s 8 -c 1 -f \
  -o /tmp/d /tmp/h/bin/sy-bench --no-nccl -n 3 -w 5 --tokens 4096 --num-sms 132 --wire fp8 moe-ht >/tmp/d.log 2>&1 ||
  tail -5 /tmp/d.log >>$s
"$ncu" -i /tmp/d.ncu-rep --page details >$OUT/ncu/details.txt 2>&1
"$ncu" -i /tmp/d.ncu-rep --page source --csv --print-source sass >$OUT/ncu/sass.csv 2>/dev/null
grep -E "Duration|Memory Throughput|DRAM Throughput|Warp Cycles Per Issued|Eligible|Issued Warp|Grid Size|Function Name|sy_ht" \
  $OUT/ncu/details.txt | head -14 >>$s
bin=$(dirname "$ncu")
dis=$(command -v nvdisasm || ls /usr/local/cuda/bin/nvdisasm "$bin"/nvdisasm 2>/dev/null | head -1)
obj=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
echo "nvdisasm: ${dis:-none}, cuobjdump: ${obj:-none}" >>$s
if [ -n "$dis" ] && [ -n "$obj" ]; then
  mkdir -p /tmp/elf && (cd /tmp/elf && "$obj" -xelf all /tmp/h/lib/libswitchyard.so >/dev/null 2>&1)
  # the cubin that defines the kernels (others name them: launch.cu's; run 53's first form took the last that named
  # them, and its line table did not match the profile: 15,365 of 16,128 opcodes off)
  for c in /tmp/elf/*.cubin; do "$dis" -g -c "$c" 2>/dev/null | grep -q "^\.text\._Z[0-9]*sy_ht_dispatch" && "$dis" -g -c "$c" >$OUT/ncu/lib.sass 2>/dev/null; done
  k=$(grep -o "sy_ht_dispatch[a-z_]*" $OUT/ncu/details.txt | head -1) # the profiled instance
  f=$(grep -o "^\.text\._Z${#k}${k}[^:]*" $OUT/ncu/lib.sass | head -1 | sed 's/^\.text\.//')
  echo "profiled: $k ($f)" >>$s
  for src in src/cuda/moe_ht/rows.cuh src/cuda/moe_ht/dispatch.cu; do
    python3 tools/dev/ncu-lines.py $OUT/ncu/sass.csv $OUT/ncu/lib.sass "$f" $src 30 >$OUT/ncu/lines.$(basename $src).txt 2>&1
  done
  head -32 $OUT/ncu/lines.rows.cuh.txt >>$s
fi
cat $s
