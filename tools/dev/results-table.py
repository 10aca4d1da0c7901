#!/usr/bin/env python3
"""results-table.py BENCH.json [...] — sy-bench's --json output (alltoall, attn, moe-ll, moe-ht) as the Markdown tables
bench/RESULTS.md uses, one per file, so a device run's figures go into RESULTS.md as measured, not retyped.
tools/gpu-check.sh writes OUTDIR/results.md with it. A value that was not measured prints as "-". "µs" columns
are CUDA-event times, "kernel" columns CUPTI kernel times (the device time a call's kernels held alone). moe-ll's
DS, DR, CS, CR: dispatch_send, dispatch_recv, combine_send, combine_recv called as separate halves, in kernel time
where the run measured it, else between events. moe-ht: one row per call; GB/s on kernel time where measured
(`deepep`: rows received, one per (token, rank), own rank included; `link`: without the own rank; `hbm`: bytes read
+ written), `% ceil` the call's HBM GB/s over the device-to-device copy's (world 1), `x NCCL` NCCL's time / ours.
pool: host time per allocation + free pair (medians, 99th percentiles), `x` the baseline's median / sy_pool's."""
import json
import sys


def num(v, digits=2):
    return "-" if v is None or v == 0 else f"{v:.{digits}f}"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if h[0] != "_" else "---" for h in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out).replace("| _", "| ")


def mib(b):
    return f"{b / 2**20:.2f}" if b >= 2**20 / 100 else f"{b / 1024:.1f} KiB"


def alltoall(rows):
    head = ["bytes/rank", "ours µs", "ours kernel", "host µs", "busbw GB/s", "#wrong", "NCCL µs", "NCCL kernel",
            "NCCL busbw", "speedup"]
    return table(head, [[r["bytes_per_rank"], num(r["ours"]["time_us"]), num(r["ours"].get("kernel_us")),
                         num(r["ours"]["host_us"]), num(r["ours"]["busbw_GBs"]), r["ours"]["wrong"],
                         num(None if r["nccl"].get("absent") else r["nccl"]["time_us"]),
                         num(None if r["nccl"].get("absent") else r["nccl"].get("kernel_us")),
                         num(None if r["nccl"].get("absent") else r["nccl"]["busbw_GBs"]), num(r["speedup"])]
                        for r in rows])


def attn(rows):
    head = ["tokens/rank", "seqs", "_plan", "MiB", "ours µs", "ours kernel", "host µs", "busbw GB/s", "% store",
            "#wrong", "NCCL µs", "NCCL kernel", "NCCL busbw", "speedup"]
    return table(head, [[r["tokens_per_rank"], r["sequences"], r["plan"], mib(r["bytes_max"]),
                         num(r["ours"]["time_us"]), num(r["ours"].get("kernel_us")), num(r["ours"]["host_us"]),
                         num(r["ours"]["busbw_GBs"]), num(r["ours"]["pct_of_store"], 1), r["ours"]["wrong"],
                         num(r["nccl"]["time_us"]), num(r["nccl"].get("kernel_us")), num(r["nccl"]["busbw_GBs"]),
                         num(r["speedup"])] for r in rows])


def moe(rows):
    head = ["tokens", "_wire", "_mode", "disp µs", "disp kernel", "disp graph", "disp host", "comb µs", "comb kernel",
            "comb graph", "comb host", "#wrong", "NCCL disp", "NCCL disp kernel", "NCCL comb", "NCCL comb kernel",
            "x disp", "x comb", "_x on", "DS", "DR", "CS", "CR"]
    out = []
    for r in rows:
        d, c, n = r["dispatch"], r["combine"], r["nccl"]
        hk = r.get("halves_kernel_us") or {}
        h = hk if hk.get("dispatch_send") is not None else r.get("halves_us", {})  # kernel time where measured
        absent = n.get("absent")
        out.append([r["tokens_per_rank"], r["wire"], r["mode"], num(d["time_us"]), num(d.get("kernel_us")),
                    num(d["graph_us"]), num(d["host_us"]), num(c["time_us"]), num(c.get("kernel_us")),
                    num(c["graph_us"]), num(c["host_us"]), r["wrong"],
                    num(None if absent else n["dispatch_us"]), num(None if absent else n.get("dispatch_kernel_us")),
                    num(None if absent else n["combine_us"]), num(None if absent else n.get("combine_kernel_us")),
                    num(r["speedup_dispatch"]), num(r["speedup_combine"]), r.get("speedup_basis", "event"),
                    num(h.get("dispatch_send")),
                    num(h.get("dispatch_recv")), num(h.get("combine_send")), num(h.get("combine_recv"))])
    return table(head, out)


def moe_ht(rows):
    head = ["tokens", "_wire", "_call", "µs", "kernel", "host µs", "deepep GB/s", "link GB/s", "hbm GB/s", "% ceil",
            "SMs", "#wrong", "NCCL µs", "NCCL kernel", "x NCCL"]
    out = []
    for r in rows:
        n, ours = r["nccl"], r["supported"]
        absent = n.get("absent")
        out.append([r["tokens_per_rank"], r["wire"], r["call"], num(r["time_us"] if ours else None),
                    num(r.get("kernel_us") if ours else None), num(r["host_us"] if ours else None),
                    num(r["deepep_GBs"], 1), num(r["link_GBs"], 1), num(r["hbm_GBs"], 1),
                    num(r["pct_of_ceiling"], 1), r["num_sms"], r["wrong"],
                    num(None if absent else n["time_us"]), num(None if absent else n.get("kernel_us")),
                    num(r["speedup_nccl"])])
    text = table(head, out)
    ceilings = {}
    for r in rows:
        c = r.get("ceiling") or {}
        if not c.get("absent") and c.get("hbm_GBs"):
            ceilings[(r["tokens_per_rank"], r["wire"])] = c
    for (tokens, wire), c in sorted(ceilings.items()):
        text += (f"\n\nCeiling, {tokens} tokens, {wire}: a {c['copy_bytes'] / 2**20:.1f} MiB device-to-device copy, "
                 f"{num(c['time_us'])} µs, {num(c['hbm_GBs'], 1)} GB/s read + write.")
    return text


def pool(rows):
    head = ["bytes", "sy_pool µs", "sy_pool p99", "#wrong", "mallocAsync µs", "mallocAsync p99", "cudaMalloc µs",
            "cudaMalloc p99", "x async", "x malloc", "reserved", "used_high"]

    def us(v, key):
        return "-" if v.get("absent") else num(v.get(key))

    return table(head, [[r["bytes"], us(r["sy_pool"], "host_us"), us(r["sy_pool"], "p99_us"), r["sy_pool"]["wrong"],
                         us(r["cuda_malloc_async"], "host_us"), us(r["cuda_malloc_async"], "p99_us"),
                         us(r["cuda_malloc"], "host_us"), us(r["cuda_malloc"], "p99_us"), num(r["speedup_async"]),
                         num(r["speedup_malloc"]), r["pool_stats"]["reserved"], r["pool_stats"]["used_high"]]
                        for r in rows])


def layer(rows):
    head = ["shape", "tokens", "way", "step µs", "enqueue µs", "overlap", "comm SMs", "#wrong"]
    return table(head, [[r["shape"], r["tokens"], r["way"], num(r["step_us"]), num(r["enqueue_us"]),
                         "-" if r["overlap"] is None else num(r["overlap"]), r["sms"], r["wrong"]] for r in rows])


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        rows = doc.get("rows", [])
        slow = [r for r in rows if r.get("entry") == "gpu_slowdown"]  # sy-bench's NVML note, not a table row
        rows = [r for r in rows if r.get("entry") != "gpu_slowdown"]
        if not rows:
            print(f"<!-- {path}: no rows -->\n")
            continue
        kind = {"alltoall": alltoall, "attn": attn, "moe-ll": moe, "moe-ht": moe_ht, "pool": pool,
                "layer": layer}.get(doc.get("entry"))
        if kind is None:
            print(f"<!-- {path}: unknown entry {doc.get('entry')!r} -->\n")
            continue
        first = rows[0]
        print(f"### {doc['entry']}: {first['backend']} backend, world {first['world']} ({path})\n")
        print(kind(rows) + "\n")
        for r in slow:
            print(f"GPU slowdowns during the entry (NVML, the most on any rank): {r['power_ms']} ms by the power limit, "
                  f"{r['thermal_ms']} ms by temperature; the hottest GPU at the entry's start or end {r['hottest_c']} C\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
