#!/usr/bin/env bash
# x2-pullalign62.sh — for the next session (two GPUs, ~7 minutes; one GPU works too, ranks sharing it): run 61 found
# pull.cu's bulk copies at half pullx's rate; a helper's read of the SASS found why it might be: the device link puts
# the dynamic shared memory 16-byte aligned (pull.cu's stages 80 bytes past a 128-byte boundary), pullx's 512. Since
# then the stages start on a 1,024-byte boundary (SY_HT_PULL_ALIGN). Here, stopping at the first failure:
# (1) synccheck on one case, the tests with SY_HT_PULL=1 at $n GPUs (or 2 sharing GPU 0) and 3 ranks sharing GPU 0
#     (also the review's fixes of e8501d7: a stage freed by wait_group.read per item, the sources' rotation);
# (2) pullx with its stages skewed by 80 bytes (EC_SKEW=80) against aligned — the reverse check — and with every buffer
#     from 2 MB pieces (EC_VMM=1);
# (3) BF16 and FP8 dispatch at 16 SMs: pull aligned / pull as before (-DSY_HT_PULL_ALIGN=0) / push, a b c c b a;
# (4) if the aligned pull beats push: 8,192 tokens, 24 / 32 SMs both ways, and issue 19's table under pull with NCCL.
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_main
(build_tree /tmp/a0 . "-DSY_HT_PULL_ALIGN=0"; echo "variant built at $SECONDS s" >>$s) &
bp=$!
R=$n G=""
[ "$n" -lt 2 ] && R=2 G="--gpus 0,0"
SY_HT_PULL=1 SY_TEST_CASE=1 timeout 120 build/bin/syrun -n $R $G /usr/local/cuda/bin/compute-sanitizer --tool synccheck \
  --print-limit 5 build/tests/gpu/test_gpu_moe_ht >/tmp/san.txt 2>&1
echo "== synccheck, case 1, SY_HT_PULL=1, $R ranks rc=$? ($SECONDS s)" >>$s
grep -E "ERROR SUMMARY| ok |rror" /tmp/san.txt | head -8 >>$s
ok=1
test_ht build w$R.pull $R "$G" SY_HT_PULL=1
grep -q "rc=0" <(tail -1 $s) || ok=0
[ $ok = 1 ] && { test_ht build w3s.pull 3 "--gpus 0,0,0" SY_HT_PULL=1; grep -q "rc=0" <(tail -1 $s) || ok=0; }
for e in "" EC_SKEW=80 EC_VMM=1; do
  echo "== pullx $e at $n GPUs ($SECONDS s)" >>$s
  env $e timeout 100 build/bin/sy-expand-ceiling pullx 2>&1 | grep -E "pullx|kind| 16 " >>$s
done
wait $bp
P() { # LABEL DIR PULL [ARGS...]: bench_tree's rows, with syrun's $G
  local label=$1 d=$2 p=$3; shift 3
  SY_HT_PULL=$p timeout 120 $d/bin/syrun -n $R $G $d/bin/sy-bench --no-nccl --tokens 4096 --num-sms 16 --recv arena \
    "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label rc=$?" >>$s
  grep -E " dispatch " /tmp/r.txt | sed 's/\[rank 0\]//' | grep -v "^\[rank" >>$s
}
if [ $ok = 1 ]; then
  for v in al a0 push push a0 al; do
    case $v in
      al) P "pull, stages aligned" build 1 ;;
      a0) P "pull, stages as before" /tmp/a0 1 ;;
      push) P "push" build 0 ;;
    esac
  done
  P "pull, 8,192 tokens" build 1 --tokens 8192
  P "push, 8,192 tokens" build 0 --tokens 8192
  for m in 24 32; do P "pull, $m SMs" build 1 --num-sms $m; P "push, $m SMs" build 0 --num-sms $m; done
  if [ "$n" -ge 2 ]; then
    SY_HT_PULL=1 timeout 200 build/bin/syrun -n $n build/bin/sy-bench --recv arena --json $OUT/ht_w${n}_pull.json \
      moe-ht >/tmp/r.txt 2>&1
    echo "== world $n, 16 SMs, arena, NCCL beside, SY_HT_PULL=1 rc=$?" >>$s
    grep -E " (layout|dispatch|combine|combine_bwd|dispatch_bwd) |rror" /tmp/r.txt | sed 's/\[rank 0\]//' |
      grep -v "^\[rank" | head -24 >>$s
  fi
fi
echo "end at $SECONDS s" >>$s
cat $s
