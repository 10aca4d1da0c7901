#!/usr/bin/env bash
# x1-marks.sh — one device call on one GPU: the Python package's host time above the C calls with its stream marks
# (Comm._used, Tensor.record_stream) and without (SWITCHYARD_STREAM_MARKS=0), alternated three times on one
# machine. The wheel comes with the call (carry build/wheel); its Python files are replaced by the checkout's.
s=$OUT/summary.txt
python3 -m pip install --quiet --no-deps --no-index --force-reinstall build/wheel/*.whl >/tmp/pip.log 2>&1
echo "== pip install wheel rc=$?" >>$s
dir=$(python3 -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('switchyard').origin))")
cp python/switchyard/*.py "$dir"/
for i in 1 2 3; do
  for m in 1 0; do
    echo "== marks $m (round $i)" >>$s
    SWITCHYARD_STREAM_MARKS=$m timeout 60 python3 tools/dev/py-overhead.py 2>&1 | grep -E "^#  call|^  " >>$s
  done
done
cat $s
