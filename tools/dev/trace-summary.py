#!/usr/bin/env python3
"""trace-summary.py [--skip N] [--calls A:B] [--block B] TRACE.json [...] — digest of switchyard's Chrome traces
(SY_TRACE_FILE): for each rank, the median and 90th-percentile duration of every phase, and of the whole kernel
per call (first block to last block), skipping the first --skip calls (warm-up); --calls A:B keeps calls A..B
only. --block B adds block B's timeline: when each of its phases begins and ends, in µs after the block's first
event of the call (medians over calls; a fused kernel's two halves share a call number: one timeline)."""
import json
import statistics
import sys
from collections import defaultdict


def main(argv):
    skip = 5
    last = 1 << 62
    block = None
    paths = []
    it = iter(argv)
    for a in it:
        if a == "--skip":
            skip = int(next(it))
        elif a == "--block":
            block = int(next(it))
        elif a == "--calls":
            lo, hi = next(it).split(":")
            skip, last = int(lo), int(hi)
        else:
            paths.append(a)
    for path in paths:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        open_ = {}
        durations = defaultdict(list)
        span = defaultdict(lambda: [float("inf"), 0.0])
        for e in events:
            if e.get("ph") not in ("B", "E"):
                continue
            call = e["args"]["call"]
            key = (e["pid"], e["tid"], e["name"], e["args"]["peer"])
            if e["ph"] == "B":
                open_[key] = e["ts"]
            elif key in open_:
                t0 = open_.pop(key)
                if skip <= call <= last:
                    durations[e["name"]].append(e["ts"] - t0)
                if e["name"].endswith(" kernel") and skip <= call <= last:
                    s = span[(e["name"], call)]
                    s[0], s[1] = min(s[0], t0), max(s[1], e["ts"])
        print(f"{path}:")
        for name, d in sorted(durations.items()):
            d.sort()
            p90 = d[int(0.9 * (len(d) - 1))]
            print(f"  {name:28s} n={len(d):6d}  median {statistics.median(d):8.2f} us  p90 {p90:8.2f} us")
        per_call = defaultdict(list)
        for (name, call), (a, b) in span.items():
            per_call[name].append(b - a)
        for name, d in sorted(per_call.items()):
            print(f"  {name + ' (all blocks)':28s} n={len(d):6d}  median {statistics.median(d):8.2f} us")
        if block is not None:
            timeline(events, block, skip, last)


def timeline(events, block, skip, last):
    calls = defaultdict(list)
    for e in events:
        if e.get("ph") in ("B", "E") and e["tid"] == block and skip <= e["args"]["call"] <= last:
            calls[(e["pid"], e["args"]["call"])].append(e)
    offsets = defaultdict(list)
    for evs in calls.values():
        t0 = min(e["ts"] for e in evs)
        seen = defaultdict(int)
        for e in sorted(evs, key=lambda e: e["ts"]):
            key = (e["name"], e["ph"], seen[(e["name"], e["ph"])])
            seen[(e["name"], e["ph"])] += 1
            offsets[key].append(e["ts"] - t0)
    print(f"  block {block} timeline over {len(calls)} calls (median µs after its first event):")
    rows = sorted(((statistics.median(v), k) for k, v in offsets.items()), key=lambda r: r[0])
    for t, (name, ph, n) in rows:
        print(f"    {t:8.2f}  {'begin' if ph == 'B' else 'end  '} {name}{'' if n == 0 else f' #{n + 1}'}")


if __name__ == "__main__":
    main(sys.argv[1:])
