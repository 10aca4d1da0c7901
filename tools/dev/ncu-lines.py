#!/usr/bin/env python3
"""ncu-lines.py SOURCE.csv SASS FUNC SRC [TOP] — where a kernel's warps wait, per CUDA source line: ncu's source
page per SASS instruction (tools/dev/ncu-moe.sh's <kernel>.<tokens>.source.csv) with its warp stall samples summed per
line, each instruction's line taken from SASS = `nvdisasm -g` of a -lineinfo cubin of the same source and flags
(FUNC: the kernel's mangled name; offsets within the function; "opcode mismatches" > 0 means the cubin is not the
profiled build). The toolkit here lacks nvdisasm: `pip download nvidia-cuda-nvdisasm` has it."""
import csv, re, sys
from collections import defaultdict
csvp, sassp, func, srcp = sys.argv[1:5]
top = int(sys.argv[5]) if len(sys.argv) > 5 else 40
rows = list(csv.reader(open(csvp)))
hdr = rows[1]
data = [r for r in rows[2:] if r and r[0].startswith('0x')]
base = int(data[0][0], 16)
col = {h: i for i, h in enumerate(hdr)}
stalls = [h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
# sass: offset -> (file, line) for function
lines = open(sassp).read().split('\n')
start = next(i for i, l in enumerate(lines) if l.startswith('.text.' + func + ':'))
where = {}
cur = None
for l in lines[start + 1:]:
    if l.startswith('.text.'):
        break
    m = re.search(r'//## File "([^"]+)", line (\d+)', l)
    if m:
        cur = (m.group(1).split('/')[-1], int(m.group(2)))
        continue
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);', l)
    if m:
        where[int(m.group(1), 16)] = (cur, m.group(2))
src = open(srcp).read().split('\n')
tot = defaultdict(int)
per = defaultdict(lambda: defaultdict(int))
allsum = 0
mismatch = 0
for r in data:
    off = int(r[0], 16) - base
    w = where.get(off)
    op = r[1].strip().split()[0] if r[1].strip() else ''
    if w is None or (w[1].split()[0] if w[1] else '') not in (op, ) and not w[1].startswith('@') and op and not op.startswith('@'):
        mismatch += 1
    key = w[0] if w else ('?', 0)
    n = int(r[col['Warp Stall Sampling (All Samples)']] or 0)
    tot[key] += n
    allsum += n
    for s in stalls:
        v = int(r[col[s]] or 0)
        if v:
            per[key][s] += v
print(f'{csvp}: {allsum} samples, {len(data)} instructions, opcode mismatches {mismatch}')
for key, n in sorted(tot.items(), key=lambda x: -x[1])[:top]:
    f, ln = key
    txt = src[ln - 1].strip()[:70] if f == srcp.split('/')[-1] and ln else ''
    reasons = ', '.join(f'{s[6:]} {v}' for s, v in sorted(per[key].items(), key=lambda x: -x[1])[:3])
    print(f'{n:6d} {100*n/allsum:5.1f}% {f}:{ln:<5d} {txt:70s} | {reasons}')
