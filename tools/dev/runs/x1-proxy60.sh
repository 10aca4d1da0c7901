#!/usr/bin/env bash
# x1-proxy60.sh — ready for one GPU (~4 minutes; not run yet). Run 59 found the decode step's replayed host time slow
# (5.6-35.5 us) or fast (2.5-4.7) a process at a time, and two threads of each process at 100% CPU: the main thread
# and presumably NVSHMEM's proxy. NVSHMEM 3.4.5's source (a helper's reading, bench/NOTES.md run 59): with only the
# P2P transport up the proxy runs its "minimal" loop, a spin on two host words with no CUDA call, no pause and no
# sleep; NVSHMEM_DISABLE_LOCAL_ONLY_PROXY=1 (with NVSHMEM_REMOTE_TRANSPORT=none, so no remote transport asks for the
# full proxy) starts none. Prediction: if a spinning sibling thread slows the main thread's driver calls, (1) the
# probe's bare graph goes slow in some processes with a spinning thread beside it (`spin`) or with the library
# initialised (`sy`), and (2) without the proxy every decode process is fast. Then: every GPU test without the proxy
# (what needs it? the library never calls nvshmem_global_exit).
. tools/dev/variant.sh # dev_start
dev_start summary.txt
[ -x build/bin/sy-bench ] || SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
B=build/bin
NOPROXY="NVSHMEM_DISABLE_LOCAL_ONLY_PROXY=1 NVSHMEM_REMOTE_TRANSPORT=none"
for i in 1 2 3 4; do
  for m in quick spin sy; do
    timeout 60 $B/sy-graph-launch-probe $m >/tmp/p.txt 2>&1
    echo "probe $i rc=$? $(grep -E 'us a replay|rror|fail' /tmp/p.txt | head -2)" >>$s
  done
  env $NOPROXY timeout 60 $B/sy-graph-launch-probe sy >/tmp/p.txt 2>&1
  echo "probe $i without the proxy rc=$? $(grep -E 'us a replay|rror|fail' /tmp/p.txt | head -2)" >>$s
done
echo "probes done at $SECONDS s" >>$s
for i in 1 2 3 4 5 6 7 8; do
  if [ $((i % 2)) = 1 ]; then how=default; e=X=0; else how="no proxy"; e=$NOPROXY; fi
  env $e timeout 40 $B/sy-bench --no-nccl --tokens 128 --settle 0 --ways c,a layer >/tmp/d.txt 2>&1
  echo "decode $i ($how) rc=$?: $(grep -E '^ *decode +128 +[ca] ' /tmp/d.txt | awk '{printf "%s host %s; ", $3, $5}')" >>$s
done
env $NOPROXY $B/sy-bench --no-nccl --tokens 128 --settle 6 --ways c layer >/tmp/d0.txt 2>&1 &
pid=$!
sleep 4.5
echo "== threads without the proxy" >>$s
top -H -b -n 1 -p $pid | sed -n 7,12p >>$s
wait $pid
echo "decode steps done at $SECONDS s" >>$s
left=$((560 - SECONDS))
env $NOPROXY GPU_CHECK_ONLY='^test_(gpu_|example|python)' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 GPU_CHECK_SHARED=1 \
  timeout $left tools/gpu-check.sh /tmp/g 2 >/tmp/gc.txt 2>&1
echo "== gpu-check without the proxy, 2 ranks sharing the GPU rc=$? at $SECONDS s" >>$s
grep -vE "^build " /tmp/g/summary.txt >>$s
echo "end at $SECONDS s" >>$s
cat $s
