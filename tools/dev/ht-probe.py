#!/usr/bin/env python3
"""ht-probe.py — digests SY_HT_PROBE files (src/cuda/moe_ht/launch.cu: a line per block of the last call of each
high-throughput MoE kernel): per rank, kernel and role (send: blocks [0, C), recv: [C, 2C)), the blocks' mean and
largest span and where it went (own rows, waiting, moving messages, counters), in us.

  python3 tools/dev/ht-probe.py probe.0.txt probe.1.txt ...
"""
import sys
from collections import defaultdict


def main(paths):
    rows = defaultdict(list)
    for path in paths:
        for line in open(path):
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            rank, kernel, block, role = int(f[0]), f[1], int(f[2]), f[3]
            start, end, own, wait, work, rounds, items, sync = map(float, f[4:12])
            rows[(rank, kernel, role)].append((start, end, own, wait, work, rounds, items, sync))
    print(f"{'rank':>4} {'kernel':<13} {'role':<4} {'blocks':>6} {'kernel_us':>9} {'span':>8} {'max':>8} "
          f"{'own':>8} {'wait':>8} {'work':>8} {'sync':>7} {'rest':>7} {'rounds':>6} {'items':>7}")
    for (rank, kernel, role), v in sorted(rows.items()):
        n = len(v)
        ends = max(x[1] for x in v)
        span = [x[1] - x[0] for x in v]
        mean = lambda i: sum(x[i] for x in v) / n
        rest = sum(s for s in span) / n - mean(2) - mean(3) - mean(4) - mean(7)
        print(f"{rank:>4} {kernel:<13} {role:<4} {n:>6} {ends:>9.1f} {sum(span) / n:>8.1f} {max(span):>8.1f} "
              f"{mean(2):>8.1f} {mean(3):>8.1f} {mean(4):>8.1f} {mean(7):>7.1f} {rest:>7.1f} {mean(5):>6.0f} "
              f"{mean(6):>7.0f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
