#!/usr/bin/env bash
# x2-combine.sh — one device call (2 GPUs; with 1 the world-2 part is skipped): where the high-throughput combine's
# time goes. SY_HT_PROBE at world 2 (16 SMs, BF16, 4,096 and 8,192 tokens; tools/dev/ht-probe.py), then Nsight
# Compute on sy_ht_combine at world 1 with 16 SMs (the SMs bound it there, as at world 2 and 4): warp states, source
# counters per SASS instruction ($OUT/combine.sass.csv), instruction statistics. $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
B=build/bin s=$OUT/summary.txt
tools/build.sh >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
nvidia-smi -L | head -1 >>$s
if [ "$n" -ge 2 ]; then
  for t in 4096 8192; do
    mkdir -p /tmp/p$t
    SY_HT_PROBE=/tmp/p$t/probe.%r.txt timeout 150 $B/syrun -n 2 $B/sy-bench --no-nccl --tokens $t --wire bf16 \
      --num-sms 16 moe-ht >/tmp/p$t/ht.txt 2>&1
    echo "== probe world 2, 16 SMs, $t tokens, rc=$?" >>$s
    grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " /tmp/p$t/ht.txt | sed 's/\[rank 0\]//' >>$s
    python3 tools/dev/ht-probe.py /tmp/p$t/probe.*.txt >>$s 2>&1
  done
fi
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$ncu" ]; then
  rep=/tmp/comb16
  timeout 240 $B/syrun -n 1 "$ncu" --section SpeedOfLight --section WarpStateStats --section SourceCounters \
    --section InstructionStats --section LaunchStats --section Occupancy --cache-control none --clock-control none \
    -k "regex:^sy_ht_combine" -s 8 -c 1 -f -o "$rep" $B/sy-bench --no-nccl -n 3 -w 5 --tokens 4096 --num-sms 16 \
    --wire bf16 moe-ht >$rep.log 2>&1
  echo "== ncu sy_ht_combine world 1, 16 SMs, 4096 tokens rc=$?" >>$s
  "$ncu" -i "$rep.ncu-rep" --page details >$OUT/combine.details.txt 2>&1
  "$ncu" -i "$rep.ncu-rep" --page source --print-source sass --csv >$OUT/combine.sass.csv 2>&1
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc|Registers Per|Achieved Occupancy|DRAM Through|Memory Through|L1/TEX Hit|stall" \
    $OUT/combine.details.txt >>$s
else
  echo "no ncu" >>$s
fi
cat $s
