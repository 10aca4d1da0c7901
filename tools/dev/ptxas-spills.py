#!/usr/bin/env python3
"""ptxas-spills.py --limit BYTES [--limit-for NAME BYTES ...] NVCC [NVCC FLAGS ...] -- FILE.cu [...] — compiles each
file to a cubin with `-Xptxas -v` and the given flags, prints every kernel's registers, stack and spills, and fails if
a kernel (`__global__`, "Compiling entry function") spills more than BYTES of stores (the first --limit-for's BYTES
for a kernel whose mangled name contains NAME). The MoE high-throughput kernels sit at
their 128-register cap, where a small change swings the spills from 20 to 460 bytes and the FP8 dispatch 10%
(bench/NOTES.md, "MoE high throughput: the second version"): ctest runs this on them (build/ptxas_spills)."""
import os
import re
import subprocess
import sys
import tempfile


def main(argv):
    if len(argv) < 4 or argv[0] != "--limit" or "--" not in argv:
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    limit = int(argv[1])
    argv = argv[2:]
    other = []  # (substring of a kernel's name, its limit)
    while len(argv) >= 3 and argv[0] == "--limit-for":
        other.append((argv[1], int(argv[2])))
        argv = argv[3:]
    cut = argv.index("--")
    nvcc, flags, files = argv[0], argv[1:cut], argv[cut + 1:]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            out = os.path.join(tmp, os.path.basename(path) + ".cubin")
            run = subprocess.run([nvcc, *flags, "-cubin", "-Xptxas", "-v", path, "-o", out], capture_output=True,
                                 text=True)
            if run.returncode != 0:
                print(run.stderr, file=sys.stderr)
                print(f"ptxas-spills: {path}: nvcc failed", file=sys.stderr)
                return 1
            entry = None
            for line in run.stderr.splitlines():
                m = re.search(r"Compiling entry function '([^']+)'", line)
                if m:
                    entry = m.group(1)
                    continue
                m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
                if m and entry:
                    stores = int(m.group(2))
                    lim = next((n for s, n in other if s in entry), limit)
                    state = "ok" if stores <= lim else f"FAIL (> {lim})"
                    print(f"{os.path.basename(path)}: {entry}: stack {m.group(1)} B, spill stores {stores} B, "
                          f"spill loads {m.group(3)} B: {state}")
                    bad += stores > lim
                m = re.search(r"Used (\d+) registers", line)
                if m and entry:
                    print(f"{os.path.basename(path)}: {entry}: {m.group(1)} registers")
                    entry = None
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
