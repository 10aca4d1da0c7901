#!/usr/bin/env bash
# x1-python.sh — one device call on one GPU: the Python package installed by pip into the machine's python3 (torch
# 2.11 and NVSHMEM 3.4.5 there) and its tests at 1 rank and at 3 ranks sharing the GPU (the GPU tests under syrun,
# tests/python/conftest.py). pip builds the library itself (scikit-build-core), so syrun comes from a plain build
# beside it. Summary in $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt
(tools/build.sh >/tmp/build.log 2>&1 || echo "build failed" >>$s) &
python3 -m pip install --quiet . >$OUT/pip.log 2>&1
echo "== pip install . rc=$?" >>$s
wait
timeout 200 build/bin/syrun -n 1 python3 -m pytest tests/python -q -p no:cacheprovider >$OUT/py1.txt 2>&1
echo "== pytest 1 rank rc=$?" >>$s
tail -3 $OUT/py1.txt >>$s
timeout 240 build/bin/syrun -n 3 --gpus 0,0,0 python3 -m pytest tests/python -q -p no:cacheprovider -x >$OUT/py3.txt 2>&1
echo "== pytest 3 ranks sharing rc=$?" >>$s
grep -E "passed|failed|error" $OUT/py3.txt | tail -6 >>$s
cat $s
