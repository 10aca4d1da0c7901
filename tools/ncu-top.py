#!/usr/bin/env python3
"""ncu-top.py CSV [...] — the CUDA source lines with the most warp-stall samples in Nsight Compute's source page
(ncu -i REPORT --page source --csv --print-source cuda), a line each: share of samples, line number, source."""
import csv
import sys


def top(path, n=25):
    with open(path, newline="", errors="replace") as f:
        rows = [r for r in csv.reader(f)]
    head_i = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r)), None)
    print(f"== {path}")
    if head_i is None:
        for r in rows[:8]:
            print("  ", r[:8])
        return
    head = rows[head_i]
    col = next(i for i, c in enumerate(head) if "Warp Stall Sampling (All" in c)
    src = next((i for i, c in enumerate(head) if c.strip().lower() == "source"), len(head) - 1)
    line = next((i for i, c in enumerate(head) if c.strip() in ("#", "Line", "# Line")), 0)
    data = []
    for r in rows[head_i + 1:]:
        if len(r) <= max(col, src):
            continue
        try:
            v = float(r[col].replace(",", "") or 0)
        except ValueError:
            continue
        data.append((v, r[line], r[src].strip()))
    total = sum(v for v, _, _ in data) or 1
    print(f"   {len(data)} lines, {total:.0f} samples")
    for v, ln, s in sorted(data, reverse=True)[:n]:
        print(f"  {100 * v / total:5.1f}%  {ln:>5}  {s[:110]}")


for p in sys.argv[1:]:
    top(p)
