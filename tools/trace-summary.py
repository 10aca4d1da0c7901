#!/usr/bin/env python3
"""trace-summary.py TRACE.json [...] — digest of switchyard's Chrome traces (SY_TRACE_FILE): for each rank,
the median and 90th-percentile duration of every phase, and of the whole kernel per call (first block to
last block), skipping the first --skip calls (warm-up)."""
import json
import statistics
import sys
from collections import defaultdict


def main(argv):
    skip = 5
    paths = []
    it = iter(argv)
    for a in it:
        if a == "--skip":
            skip = int(next(it))
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
                if call >= skip:
                    durations[e["name"]].append(e["ts"] - t0)
                if e["name"].endswith(" kernel") and call >= skip:
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


if __name__ == "__main__":
    main(sys.argv[1:])
