#!/usr/bin/env bash
# x2-overlap64.sh — for the next session (two GPUs or one, ranks sharing it; ~6 minutes). SY_HT_PULL_OVERLAP=1 (new,
# unrun): the pulled BF16 / given-FP8 dispatch copies its tokens into symmetric memory on a side stream beside its
# kernel, whose blocks take their own channels first from the caller's tokens; a one-thread kernel after the copy
# marks it ready for the peers. Predicted: the BF16 dispatch's event time down by most of the copy's ~43 us at 4,096
# tokens (run 63: 603.4 event against 560.4 kernel at 16 SMs; 267.8 against 225.0 at 132, where the push took 237.3),
# the kernel itself slower by little (its own channels first: the links idle while they run). Here:
# (1) compute-sanitizer synccheck on case 16 (bf16 300 tokens budgets) with SY_HT_PULL_OVERLAP=1; test_gpu_moe_ht
#     with it at 2 ranks, with SY_HT_PULL_SMS=4 beside it, and at 3 ranks sharing GPU 0;
# (2) moe-ht BF16 at 16, 32, 64 and 132 SMs, SY_HT_PULL=1 with overlap 0 / 1 and pushed, a b c c b a at 16 and 132.
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_main
two_ranks
SY_HT_PULL_OVERLAP=1 SY_TEST_CASE=16 timeout 120 build/bin/syrun -n $R $G /usr/local/cuda/bin/compute-sanitizer \
  --tool synccheck --print-limit 5 build/tests/gpu/test_gpu_moe_ht >/tmp/san.txt 2>&1
echo "== synccheck, case 16, overlap rc=$?" >>$s
grep -E "ERROR SUMMARY| ok |rror" /tmp/san.txt | head -8 >>$s
test_ht build w2.overlap $R "$G" SY_HT_PULL_OVERLAP=1
test_ht build w2.overlap.sms4 $R "$G" SY_HT_PULL_OVERLAP=1 SY_HT_PULL_SMS=4
test_ht build w3s.overlap 3 "--gpus 0,0,0" SY_HT_PULL_OVERLAP=1
P() { # LABEL PULL OVERLAP SMS
  SY_HT_PULL=$2 SY_HT_PULL_OVERLAP=$3 timeout 100 build/bin/syrun -n $R $G build/bin/sy-bench --no-nccl --tokens 4096 \
    --recv arena --wire bf16 --num-sms $4 moe-ht >/tmp/r.txt 2>&1
  echo "== $1, $4 SMs rc=$?" >>$s
  grep -E " dispatch |rror|ERR" /tmp/r.txt | sed 's/\[rank 0\]//' | grep -v "^\[rank" >>$s
}
for m in 16 132; do
  for v in a b c c b a; do
    case $v in
      a) P "pulled, copy before" 1 0 $m ;; b) P "pulled, copy beside" 1 1 $m ;; c) P "pushed" 0 0 $m ;;
    esac
  done
done
for m in 32 64; do P "pulled, copy before" 1 0 $m; P "pulled, copy beside" 1 1 $m; P "pushed" 0 0 $m; done
echo "end at $SECONDS s" >>$s
cat $s
