#!/usr/bin/env bash
# x1-steal58.sh — run 58, call 6 (one GPU, ~2 minutes): the decode step's host time against the VM's stolen time.
# Call 5 found no CPU dependence (the same CPU 2.28 and 12.11 us, 4.30 and 27.23) and the eager way's host time
# (a) varying 25-91 us without c following it: time-varying noise. Here /proc/stat's steal (and the whole CPU time)
# every 0.5 s beside five decode processes, c only.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
[ -x build/bin/sy-bench ] || SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1
B=build/bin
( while true; do echo "$(date +%s.%N | cut -c1-14) $(head -1 /proc/stat)"; sleep 0.5; done ) >/tmp/stat.txt &
bg=$!
for i in 1 2 3 4 5; do
  t0=$(date +%s.%N | cut -c1-14)
  timeout 35 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 128 --settle 0 --ways c layer >/tmp/d.txt 2>&1
  t1=$(date +%s.%N | cut -c1-14)
  st=$(awk -v a=$t0 -v b=$t1 '$1>=a && $1<=b {if(!n){s0=$10;u0=$3+$4+$5+$6+$7+$8+$9+$10} s1=$10;u1=$3+$4+$5+$6+$7+$8+$9+$10;n++} END{if(n>1) printf "steal %d of %d ticks", s1-s0, u1-u0}' /tmp/stat.txt)
  echo "run $i ($t0 - $t1): $(grep -E '^\[rank 0\] +decode +128 +c ' /tmp/d.txt | awk '{print "c host " $7}') — $st" >>$s
done
kill $bg
cp /tmp/stat.txt $OUT/stat.txt
echo "end at $SECONDS s" >>$s
cat $s
