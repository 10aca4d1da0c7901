#!/usr/bin/env python3
"""ab-digest.py AB_OUTPUT — the kernel times of tools/dev/ab.sh's rounds side by side: one line per benchmark row
(moe-ll: tokens, wire, mode and dispatch or combine; attn: tokens and plan; alltoall: bytes per rank), then per
tree the kernel-time column (CUPTI) of every round, so that a change shows as two sets of numbers that do or
do not overlap."""
import collections
import sys


def digest(lines):
    rows = collections.OrderedDict()
    tree = None
    for line in lines:
        if line.startswith("== "):
            tree = line[3:].strip()
            continue
        if tree is None or "|" not in line or line.startswith("#"):
            continue
        parts = [p.split() for p in line.split("|")]
        head = parts[0]
        try:
            if len(head) == 3 and head[1] in ("fp8", "bf16"):  # moe-ll
                for name, col in (("dispatch", 1), ("combine", 2)):
                    rows.setdefault(("moe-ll",) + tuple(head) + (name,), collections.defaultdict(list))[tree].append(parts[col][1])
            elif len(head) == 2:  # alltoall: bytes per rank, per peer
                rows.setdefault(("alltoall", head[0]), collections.defaultdict(list))[tree].append(parts[1][1])
            elif len(head) >= 3:  # attn: tokens, replicas, plan, ...
                rows.setdefault(("attn", head[0], head[2]), collections.defaultdict(list))[tree].append(parts[1][1])
        except IndexError:
            continue
    trees = []
    for v in rows.values():
        for t in v:
            if t not in trees:
                trees.append(t)
    print("kernel time (us), every round:", " | ".join(trees))
    for key, v in rows.items():
        print(f"{' '.join(key):32s} | " + " | ".join(" ".join(v.get(t, [])) for t in trees))


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        digest(f.readlines())
