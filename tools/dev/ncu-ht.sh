#!/usr/bin/env bash
# ncu-ht.sh OUTDIR — issue 19's one-GPU targets: Nsight Compute on the high-throughput dispatch (FP8 and BF16) and
# combine at world 1, 4,096 tokens, 132 SMs, one launch each after warm-up, caches and clocks left alone (as in
# sy-bench): OUTDIR/<kernel>.<wire>.txt (speed of light, memory workload, warp states with the dominant stall
# reasons, launch). Before it, sy-bench moe-ht at the same shape for this machine's kernel times (OUTDIR/bench.txt).
set -uo pipefail
out=${1:?usage: tools/dev/ncu-ht.sh OUTDIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p "$out"
"$root/build/bin/syrun" -n 1 "$root/build/bin/sy-bench" --tokens 4096 --num-sms 132 moe-ht >"$out/bench.txt" 2>&1
[ -n "$ncu" ] || { echo "no ncu here"; exit 1; }
for spec in "sy_ht_dispatch fp8" "sy_ht_dispatch bf16" "sy_ht_combine bf16"; do
  set -- $spec
  rep=/tmp/$1.$2
  "$root/build/bin/syrun" -n 1 "$ncu" --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section LaunchStats --section Occupancy --cache-control none --clock-control none -k "regex:^$1" -s 8 -c 1 -f \
    -o "$rep" "$root/build/bin/sy-bench" --no-nccl -n 3 -w 5 --tokens 4096 --num-sms 132 --wire "$2" moe-ht \
    >"$rep.log" 2>&1 || { tail -5 "$rep.log"; continue; }
  "$ncu" -i "$rep.ncu-rep" --page details >"$out/$1.$2.txt" 2>&1
done
grep -H -E "Duration|Memory Throughput|DRAM Throughput|Warp Cycles Per Issued|Achieved Occupancy|Registers Per" "$out"/*.txt
