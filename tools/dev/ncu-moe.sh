#!/usr/bin/env bash
# ncu-moe.sh OUTDIR [TOKENS ...] — Nsight Compute on the fused MoE kernels at world 1 (FP8, dedup), one launch
# each after warm-up: OUTDIR/<kernel>.<tokens>.txt, the details page (speed of light, launch, warp states with
# the dominant stall reason, source counters). ncu flushes caches before the profiled launch, so its durations
# run above sy-bench's (warm) kernel times; NCU_WARM=1 leaves caches and clocks alone (--cache-control none
# --clock-control none), as in sy-bench. Also OUTDIR/<kernel>.<tokens>.source.csv: the source page per SASS instruction
# (-lineinfo), warp stall samples included. NCU_KERNELS='moe_dispatch_kernel ...' picks the kernels.
set -uo pipefail
out=${1:?usage: tools/dev/ncu-moe.sh OUTDIR [TOKENS ...]}
shift
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1 128)
root=$(cd "$(dirname "$0")/../.." && pwd)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu here"; exit 1; }
mkdir -p "$out"
warm=()
[ "${NCU_WARM:-0}" = 1 ] && warm=(--cache-control none --clock-control none)
for kernel in ${NCU_KERNELS:-moe_dispatch_kernel moe_combine_kernel}; do
  for t in "${sizes[@]}"; do
    rep=/tmp/$kernel.$t
    "$root/build/bin/syrun" -n 1 "$ncu" --section SourceCounters --section WarpStateStats --section LaunchStats \
      --section SpeedOfLight "${warm[@]}" --import-source yes -k "regex:^$kernel" -s 40 -c 1 -f -o "$rep" \
      "$root/build/bin/sy-bench" --no-nccl -n 3 -w 50 --tokens "$t" --wire fp8 --mode dedup moe-ll >"$rep.log" 2>&1 ||
      { tail -5 "$rep.log"; continue; }
    "$ncu" -i "$rep.ncu-rep" --page details >"$out/$kernel.$t.txt" 2>&1
    "$ncu" -i "$rep.ncu-rep" --page source --print-source sass --csv >"$out/$kernel.$t.source.csv" 2>&1
  done
done
grep -H -E "Duration|SM Active Cycles|Warp Cycles Per Issued|stalled" "$out"/*.txt
