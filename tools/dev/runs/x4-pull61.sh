#!/usr/bin/env bash
# x4-pull61.sh — ready for the next session (two or four GPUs, ~8 minutes): pull.cu (SY_HT_PULL=1), the dispatch
# pulled in a kernel of its own, after run 60's call 4 (its first test case passed at 4 GPUs, its second stuck) and the
# fixes since (the pull's counters zeroed at create; a divergent __shfl_sync in the FP8 scales' loop; bounded stage
# waits; a bad handle still counted; the scan's count checked). Here, stopping at the first failure:
# (1) test_gpu_moe_ht case 1 (fp8 align 16, the one that stuck) under compute-sanitizer synccheck at $n ranks, then
#     every case with SY_HT_PULL=1 at $n GPUs, by blocks, and at 3 ranks sharing GPU 0;
# (2) moe-ht at world $n, 16 SMs, 4,096 tokens, recv in the arena: push / pull a b b a (every call's rows: the combines
#     read the pulled dispatch's rows), then 8,192 tokens and 24 / 32 SMs both ways; the issue-19 table under pull;
# (3) x4-probe-sms60.sh's probes if the time is left.
. tools/dev/variant.sh # dev_start, bench_tree, probe_tree
dev_start summary.txt
export SY_HEAP_SIZE=8G
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
T=build/tests/gpu/test_gpu_moe_ht
SY_HT_PULL=1 SY_TEST_CASE=1 timeout 120 build/bin/syrun -n $n /usr/local/cuda/bin/compute-sanitizer --tool synccheck \
  --print-limit 5 $T >/tmp/san.txt 2>&1
echo "== synccheck, case 1, SY_HT_PULL=1, $n ranks rc=$? ($SECONDS s)" >>$s
grep -E "ERROR SUMMARY| ok |rror" /tmp/san.txt | head -12 >>$s
t() { # NAME RANKS GPUS ENV...
  local name=$1 r=$2 g=$3; shift 3
  env "$@" timeout 90 build/bin/syrun -n $r $g $T >/tmp/t_$name.txt 2>&1
  local rc=$?
  echo "test_gpu_moe_ht $name: n=$r $g $* rc=$rc ($(grep -c ' ok ' /tmp/t_$name.txt) cases ok, $SECONDS s)" >>$s
  [ $rc = 0 ] || { grep -E "FAIL|rror" /tmp/t_$name.txt | grep -v "moe_ht layout: an expert id" | head -8 >>$s;
    cp /tmp/t_$name.txt $OUT/; }
  return $rc
}
ok=1
t w$n.pull $n "" SY_HT_PULL=1 || ok=0
[ $ok = 1 ] && { t w$n.pullblocks $n "" SY_HT_PULL=1 SY_HT_ROLES=0 || ok=0; }
[ $ok = 1 ] && { t w3s.pull 3 "--gpus 0,0,0" SY_HT_PULL=1 || ok=0; }
if [ $ok = 1 ]; then
  one() { SY_HT_PULL=$2 bench_tree build "world $n, $1 SMs, $3 tokens, pull $2" $n \
    "dispatch|combine|combine_bwd|dispatch_bwd" --tokens $3 --recv arena --num-sms $1; }
  for p in 0 1 1 0; do one 16 $p 4096; done
  for p in 1 0; do one 16 $p 8192; one 24 $p 4096; one 32 $p 4096; done
  echo "bench done at $SECONDS s" >>$s
  SY_HT_PULL=1 timeout 200 build/bin/syrun -n $n build/bin/sy-bench --recv arena --json $OUT/ht_w${n}_pull.json moe-ht \
    >/tmp/r.txt 2>&1
  echo "== world $n, 16 SMs, arena, NCCL beside, SY_HT_PULL=1 rc=$?" >>$s
  grep -E " (layout|dispatch|combine|combine_bwd|dispatch_bwd) |target|rror" /tmp/r.txt | sed 's/\[rank 0\]//' |
    grep -v "^\[rank" | head -30 >>$s
fi
if [ $SECONDS -lt 420 ]; then
  for r in 1 0; do
    SY_HT_ROLES=$r probe_tree build "SY_HT_ROLES=$r, 32 SMs, 4,096 tokens BF16" $n --tokens 4096 --wire bf16 \
      --recv arena --num-sms 32
  done
fi
echo "end at $SECONDS s" >>$s
cat $s
