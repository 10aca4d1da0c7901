#!/usr/bin/env bash
# x1-bulk54.sh — run 54, call 1 (~4 minutes; the patch +12.9% at 132 and 16 SMs: dropped). Issue 19's FP8
# dispatch at world 1 (64.6-65.7% of the copy's rate against >= 70%, run 53): with the sinks' fields loaded ahead (SY_HT_STG) its warps wait on
# the stores themselves — 14 passes x 8 rows x 2 store instructions a token. tools/dev/patches/ht-bulk-store.patch
# (SY_HT_BULK, written after run 53's device time, compiled but never run): a warp quantises a token whose sinks are
# all rows here into its own buffer of shared memory (16 x 7,424 bytes at hidden 7168) and one lane a row
# bulk-copies it (cp.async.bulk), the scales stored from the buffer by the lanes — 14 shared stores, 8 bulk copies and
# 16 scale stores a token. Predicted: fewer instructions a token; the risk is the buffer's reuse (a warp waits for its
# copies to have read it before the next token's stores) as run 26's bulk copies for BF16 lost on their round trips.
# p = the patch on this tree, h = this tree. test_gpu_moe_ht with p at 1 rank and 3 sharing the GPU (SY_HT_PREQUANT=0:
# the in-kernel quantisation from world 2, own tokens by the bulk path, with the roles by blocks: by warps the object
# takes no buffers); then the FP8 dispatch (and combine_bwd, launched without the buffers' shared memory) at 132 SMs
# h p p h and at 16 SMs p h. A helper's review of the patch (read-only) found no defect.
. tools/dev/variant.sh # build_tree, dev_start, test_ht, bench_tree
dev_start summary.txt
mkdir -p /tmp/pb && tar --exclude=./build --exclude=./ab -cf - . | tar -xf - -C /tmp/pb
(cd /tmp/pb && patch -p1 <tools/dev/patches/ht-bulk-store.patch >/dev/null) || echo "patch failed" >>$s
build_tree /tmp/p /tmp/pb ""
build_tree /tmp/h . ""
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/p w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/p w3 3 "--gpus 0,0,0" SY_HT_PREQUANT=0 SY_HT_ROLES=0 # the test's FP8 cases hold <= 16 SMs: roles auto there
test_ht /tmp/p w3r 3 "--gpus 0,0,0" SY_HT_PREQUANT=0                # (no buffers with roles: the object without them)
grep -E "wrong|FAIL|differ|rror" /tmp/t_w1.txt /tmp/t_w3.txt /tmp/t_w3r.txt | head -8 >>$s
for v in h p p h; do
  [ $SECONDS -lt 400 ] && bench_tree /tmp/$v "fp8 132 ($v)" 1 "dispatch|combine_bwd" --tokens 4096 --num-sms 132 --wire fp8
done
for v in p h; do
  [ $SECONDS -lt 460 ] && bench_tree /tmp/$v "fp8 16 ($v)" 1 "dispatch" --tokens 4096 --num-sms 16 --wire fp8
done
cat $s
