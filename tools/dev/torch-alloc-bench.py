#!/usr/bin/env python3
"""torch-alloc-bench.py [--iters N] [--warmup N] [--sizes 4K,1M,64M] [--device D] [--json FILE] — the host time of
PyTorch's CUDA caching allocator, to read beside `sy-bench pool` (the same sizes, units and method): one allocation
and its free, a pair, timed alone with time.perf_counter_ns on one non-blocking stream with nothing else queued, the
stream synchronised after each batch of 100 pairs, untimed; median, mean and 99th percentile in µs. Two pairs per
size: `torch.empty+del` (torch.empty(bytes, dtype=torch.uint8, device='cuda') then del: what a PyTorch program pays,
the dispatcher included) and `caching_allocator_alloc+delete` (torch.cuda.caching_allocator_alloc / _delete: closer
to the allocator alone). The `floor` line is an empty timed pair (a Python call and the two clock reads), part of
every row. Python's garbage collector is off while timing. Without torch, or without a CUDA device, it prints one
`# ... skipped` line and exits 0."""
import argparse
import gc
import json
import statistics
import sys
import time

BATCH = 100  # pairs between stream synchronisations, as sy-bench pool


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)


def time_pairs(pair, stream, iters, warmup):
    """Per-pair host times in µs: warm-up pairs untimed, then iters pairs in batches of BATCH."""
    for i in range(warmup):
        pair()
        if (i + 1) % BATCH == 0:
            stream.synchronize()
    stream.synchronize()
    out = []
    clock = time.perf_counter_ns
    while len(out) < iters:
        for _ in range(min(BATCH, iters - len(out))):
            t0 = clock()
            pair()
            out.append((clock() - t0) * 1e-3)
        stream.synchronize()
    return out


def summary(t):
    s = sorted(t)
    return {"median_us": statistics.median(s), "mean_us": statistics.fmean(s), "p99_us": s[len(s) * 99 // 100],
            "pairs": len(s)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=10000, help="timed pairs per size (default 10000)")
    ap.add_argument("--warmup", type=int, default=1000, help="untimed pairs first (default 1000)")
    ap.add_argument("--sizes", default="4K,1M,64M", help="bytes per allocation, comma-separated (default 4K,1M,64M)")
    ap.add_argument("--device", type=int, default=0, help="CUDA device (default 0)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]

    try:
        import torch
    except Exception as e:  # ImportError, or a broken install (a missing CUDA library)
        print(f"# torch-alloc-bench: skipped: torch is not importable ({type(e).__name__}: {e})")
        return 0
    if not torch.cuda.is_available() or torch.cuda.device_count() <= args.device:
        print(f"# torch-alloc-bench: skipped: torch {torch.__version__} sees no CUDA device {args.device} "
              f"(torch.version.cuda {torch.version.cuda}, {torch.cuda.device_count()} devices)")
        return 0

    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    prop = torch.cuda.get_device_properties(dev)
    backend = torch.cuda.get_allocator_backend() if hasattr(torch.cuda, "get_allocator_backend") else "unknown"
    stream = torch.cuda.Stream(device=dev)  # PyTorch's streams are non-blocking
    print(f"# torch-alloc-bench: torch {torch.__version__} (cuda {torch.version.cuda}), device {prop.name} "
          f"({prop.multi_processor_count} SMs), allocator {backend}")
    print(f"# per size: {args.iters} timed pairs after {args.warmup} warm-up, each pair (alloc + free) timed alone, "
          f"host clock (time.perf_counter_ns); one non-blocking stream, synchronised after each batch of {BATCH} "
          f"pairs, untimed; gc off")

    rows = []
    gc.disable()
    try:
        with torch.cuda.stream(stream):
            floor = summary(time_pairs(lambda: None, stream, args.iters, args.warmup))
            print(f"# floor: an empty timed pair (a Python call, two clock reads) {floor['median_us']:.3f} us median")
            print("#\n# %10s  %-32s %10s %10s %10s" % ("bytes", "pair", "median_us", "mean_us", "p99_us"))
            for n in sizes:
                def pair_empty(n=n):
                    x = torch.empty(n, dtype=torch.uint8, device=dev)
                    del x

                def pair_raw(n=n):
                    torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(n, dev, stream))

                pairs = [("torch.empty+del", pair_empty)]
                if hasattr(torch.cuda, "caching_allocator_alloc"):
                    pairs.append(("caching_allocator_alloc+delete", pair_raw))
                for name, fn in pairs:
                    s = summary(time_pairs(fn, stream, args.iters, args.warmup))
                    rows.append({"bytes": n, "pair": name, **s})
                    print("  %10d  %-32s %10.2f %10.2f %10.2f" % (n, name, s["median_us"], s["mean_us"], s["p99_us"]))
    finally:
        gc.enable()
    print(f"# torch.cuda.memory_reserved {torch.cuda.memory_reserved(dev)} bytes, max_memory_allocated "
          f"{torch.cuda.max_memory_allocated(dev)} bytes")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"entry": "torch-alloc", "torch": torch.__version__, "cuda": torch.version.cuda,
                       "device": prop.name, "allocator": backend, "floor_us": floor["median_us"], "rows": rows}, f,
                      indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
