#!/usr/bin/env bash
# x1-power54.sh — run as part of x1-faults54.sh (run 54, call 2: b at a higher clock than s). Why the overlapped step (way b) is slower
# than the step with no overlap on every SM (way s) at world 1 (run 53: +2.3% to +10.1%). Three candidates: the 16 SMs
# the GEMMs give up (run 48: +1.2-3.4% on 116 SMs), HBM shared with GEMMs bound by the experts' weights, and the
# power limit (the communication's HBM traffic beside the GEMMs lowers the clock they run at; run 47 saw b 30 MHz
# under gemms at world 2). The SM clock, power and clock-event reasons every 50 ms against each way's span
# (tools/dev/power-ways.py): if b's clock sits under s's and compute's, the power limit is the larger part.
. tools/dev/variant.sh # build_tree, dev_start, smi_start, smi_digest, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/x . ""
echo "build done at $SECONDS s" >>$s
smi_start /tmp/smi.txt
layer_marked "1,5,5,3 ends 132" --tokens 4096 --split experts --end-sms 132 --micro-batches 1,5,5,3 -n 20 -w 2 -c 0 \
  --ways comm,compute,gemms,s,b,s,b
[ $SECONDS -lt 300 ] && layer_marked "16384 tokens" --tokens 16384 --split experts --end-sms 132 \
  --micro-batches 1,5,5,3 -n 8 -w 2 -c 0 --ways compute,s,b,s,b
smi_digest /tmp/smi.txt /tmp/marks.txt
cat $s
