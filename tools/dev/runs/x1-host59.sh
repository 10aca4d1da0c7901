#!/usr/bin/env bash
# x1-host59.sh — run 59, call 5 (one GPU, ~3 minutes). The decode step's host time (way c, 128 tokens, world 1):
# calls 2-4 found a slow process slow in every sample and in the eager way a too, with node priorities on or off,
# under syrun or not, while bare graphs (tools/dev/graph-launch-probe.cu) in processes between read 1.9-3.1 us.
# Here: (1) which threads of a decode process are busy (top -H while way c repeats); (2) NVSHMEM without its remote
# transport (NVSHMEM_REMOTE_TRANSPORT=none) against the default, alternating; (3) what the GPU run of 4c16841 (a
# malformed SY_PDL refused at init) and sy-info's unknown-variable line print.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
[ -x build/bin/sy-bench ] || SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
B=build/bin
SY_PDL=sometimes timeout 30 $B/sy-bench --no-nccl -n 2 alltoall >/tmp/p.txt 2>&1
echo "== SY_PDL=sometimes sy-bench alltoall rc=$?" >>$s; head -4 /tmp/p.txt >>$s
SY_FOO_BAR=1 timeout 30 $B/sy-info >/tmp/i.txt 2>&1
echo "== SY_FOO_BAR=1 sy-info rc=$?" >>$s; grep -iE "unknown|FOO" /tmp/i.txt | head -3 >>$s
timeout 60 $B/sy-bench --no-nccl --tokens 128 --settle 8 --ways c layer >/tmp/d0.txt 2>&1 &
pid=$!
sleep 6
echo "== threads of a decode process (way c settling), top -H" >>$s
top -H -b -n 1 -p $(pgrep -f "sy-bench --no-nccl --tokens 128" | head -1) 2>&1 | sed -n 7,16p >>$s
wait $pid
echo "that process: $(grep -E '^ *decode +128 +c ' /tmp/d0.txt | awk '{print "c host " $5}')" >>$s
for i in 1 2 3 4 5 6 7 8; do
  [ $SECONDS -lt 200 ] || break
  if [ $((i % 2)) = 1 ]; then how=default; e=X=0; else how="NVSHMEM_REMOTE_TRANSPORT=none"; e=NVSHMEM_REMOTE_TRANSPORT=none; fi
  env $e timeout 40 $B/sy-bench --no-nccl --tokens 128 --settle 0 --ways c,a layer >/tmp/d.txt 2>&1
  echo "process $i ($how): $(grep -E '^ *decode +128 +[ca] ' /tmp/d.txt | awk '{printf "%s host %s; ", $3, $5}')" >>$s
done
echo "end at $SECONDS s" >>$s
cat $s
