#!/usr/bin/env python3
"""ht-probe.py — digests SY_HT_PROBE files (src/cuda/moe_ht/launch.cu: a line per block of the last call of each
high-throughput MoE kernel): per rank, kernel and role (send: blocks [0, C), recv: [C, 2C)), the blocks' mean and
largest span and where it went (own rows, waiting, moving messages, counters, the senders' planning), in us.

  python3 tools/dev/ht-probe.py [--blocks] [--bins] [--kernel NAME] probe.0.txt probe.1.txt ...
  python3 tools/dev/ht-probe.py --self-test   (a file in launch.cu's format: probe_write; CI runs it)

--blocks  also each block's line (rank, kernel, role, block: span, own, wait, work), to see whether some channels or
          ranks wait while others do not (a convoy) rather than every block alike.
--bins    with a build of -DSY_HT_PROBE_BINS=B (its "#bins" lines): per rank, kernel and role, the blocks' mean own,
          wait and work in each of the B bins of time since the role's start, to see whether the two roles wait at
          the same time or in turns.
--kernel  only that kernel's rows (dispatch, combine, combine_bwd, dispatch_bwd).
"""
import sys
from collections import defaultdict


def read(paths):
    rows, bins = defaultdict(list), defaultdict(list)
    width = None
    for path in paths:
        for line in open(path):
            f = line.split()
            if not f:
                continue
            if f[0] == "#bins":
                if f[1] == "rank":  # the header: "... (us; bins of W us)"
                    width = float(line.rsplit("bins of", 1)[1].split()[0])
                    continue
                bins[(int(f[1]), f[2], f[4])].append([float(x) for x in f[5:]])
                continue
            if line.startswith("#"):
                continue
            rank, kernel, block, role = int(f[0]), f[1], int(f[2]), f[3]
            start, end, own, wait, work, rounds, items, sync = map(float, f[4:12])
            plan = float(f[12]) if len(f) > 12 else 0.0  # files before run 43 have no plan_us
            rows[(rank, kernel, role)].append((start, end, own, wait, work, rounds, items, sync, block, plan))
    return rows, bins, width


def main(args):
    blocks = "--blocks" in args
    show_bins = "--bins" in args
    only = None
    if "--kernel" in args:
        only = args[args.index("--kernel") + 1]
        args = [a for i, a in enumerate(args) if a != "--kernel" and (i == 0 or args[i - 1] != "--kernel")]
    paths = [a for a in args if not a.startswith("--")]
    if not paths:
        sys.exit(__doc__)
    rows, bins, width = read(paths)
    keep = lambda kernel: only is None or kernel == only
    print(f"{'rank':>4} {'kernel':<13} {'role':<4} {'blocks':>6} {'kernel_us':>9} {'span':>8} {'max':>8} "
          f"{'own':>8} {'wait':>8} {'work':>8} {'sync':>7} {'plan':>7} {'rest':>7} {'rounds':>6} {'items':>7}")
    for (rank, kernel, role), v in sorted(rows.items()):
        if not keep(kernel):
            continue
        n = len(v)
        ends = max(x[1] for x in v)
        span = [x[1] - x[0] for x in v]
        mean = lambda i: sum(x[i] for x in v) / n
        rest = sum(s for s in span) / n - mean(2) - mean(3) - mean(4) - mean(7) - mean(9)
        print(f"{rank:>4} {kernel:<13} {role:<4} {n:>6} {ends:>9.1f} {sum(span) / n:>8.1f} {max(span):>8.1f} "
              f"{mean(2):>8.1f} {mean(3):>8.1f} {mean(4):>8.1f} {mean(7):>7.1f} {mean(9):>7.1f} {rest:>7.1f} "
              f"{mean(5):>6.0f} {mean(6):>7.0f}")
    if blocks:
        print(f"\n{'rank':>4} {'kernel':<13} {'role':<4} {'block':>5} {'start':>8} {'span':>8} {'own':>8} {'wait':>8} "
              f"{'work':>8} {'items':>6}")
        for (rank, kernel, role), v in sorted(rows.items()):
            if not keep(kernel):
                continue
            for x in sorted(v, key=lambda x: x[8]):
                print(f"{rank:>4} {kernel:<13} {role:<4} {x[8]:>5} {x[0]:>8.1f} {x[1] - x[0]:>8.1f} {x[2]:>8.1f} "
                      f"{x[3]:>8.1f} {x[4]:>8.1f} {x[6]:>6.0f}")
    if show_bins:
        if not bins:
            print("\nno #bins lines: build with -DSY_HT_PROBE_BINS=B (src/cuda/moe_ht/ht.cuh)")
            return
        print(f"\nmean us a block in each bin of {width or 0:.1f} us since the role's start (own / wait / work)")
        for (rank, kernel, role), v in sorted(bins.items()):
            if not keep(kernel):
                continue
            b = len(v[0]) // 3
            mean = [sum(x[i] for x in v) / len(v) for i in range(3 * b)]
            last = max([i for i in range(b) if mean[i] + mean[b + i] + mean[2 * b + i] > 0] or [0])
            cells = " ".join(f"{mean[i]:5.0f}/{mean[b + i]:4.0f}/{mean[2 * b + i]:4.0f}" for i in range(last + 1))
            print(f"{rank:>4} {kernel:<13} {role:<4} {cells}")


# ---- self-test: a file as src/cuda/moe_ht/launch.cu's probe_write writes it with -DSY_HT_PROBE_BINS=4 -------------
SAMPLE = """# rank kernel block role start_us end_us own_us wait_us work_us rounds items sync_us plan_us
#bins rank kernel block role own[4] wait[4] work[4] (us; bins of 262.1 us)
0 dispatch 0 send 0.00 1000.00 50.00 400.00 500.00 16 512 20.00 10.00
#bins 0 dispatch 0 send 10.00 20.00 20.00 0.00 0.00 100.00 200.00 100.00 200.00 150.00 100.00 50.00
0 dispatch 1 send 2.00 902.00 70.00 200.00 600.00 16 512 20.00 30.00
#bins 0 dispatch 1 send 30.00 20.00 20.00 0.00 0.00 0.00 200.00 0.00 200.00 200.00 100.00 100.00
0 dispatch 2 recv 1.00 1001.00 300.00 0.00 600.00 30 1300 50.00
#bins 0 dispatch 2 recv 200.00 50.00 50.00 0.00 0.00 0.00 0.00 0.00 50.00 200.00 200.00 150.00
0 combine 0 send 0.00 10.00 0.00 1.00 8.00 2 4 1.00
#bins 0 combine 0 send 0.00 0.00 0.00 0.00 1.00 0.00 0.00 0.00 8.00 0.00 0.00 0.00
"""


def self_test():
    import contextlib
    import io
    import os
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(SAMPLE)
    try:
        rows, bins, width = read([f.name])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["--blocks", "--bins", "--kernel", "dispatch", f.name])
    finally:
        os.unlink(f.name)
    text = out.getvalue().splitlines()
    send = [line for line in text if line.split()[:3] == ["0", "dispatch", "send"]]
    want = [
        (len(rows[(0, "dispatch", "send")]) == 2, "two send blocks read"),
        (width == 262.1, f"bin width {width}"),
        (bins[(0, "dispatch", "send")][1][4:8] == [0.0, 0.0, 200.0, 0.0], "block 1's wait bins"),
        # the summary: mean span 950, max 1000, own 60, wait 300, work 550, sync 20, plan 20, rest 0
        (send and send[0].split()[3:13] == ["2", "1000.0", "950.0", "1000.0", "60.0", "300.0", "550.0", "20.0", "20.0",
                                            "0.0"], f"the send summary: {send[:1]}"),
        # a line without plan_us (files before run 43) reads as plan 0
        (rows[(0, "dispatch", "recv")][0][9] == 0.0, "the recv line's plan"),
        # --blocks: each block's line; --bins: the mean of the two send blocks per bin (own/wait/work)
        (any(line.split()[:4] == ["0", "dispatch", "send", "1"] for line in text), "block 1's line"),
        (len(send) == 4 and send[3].split()[3:5] == ["20/", "0/"] and send[3].split()[5] == "200",
         f"the send bins: {send[3:]}"),
        (not any(" combine " in line for line in text), "--kernel dispatch keeps the combine out"),
    ]
    bad = [why for ok, why in want if not ok]
    for why in bad:
        print("FAILED: " + why)
    print(f"{len(want) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    main(sys.argv[1:])
