#!/usr/bin/env python3
"""py-overhead.py — host time of the Python package's calls against the C calls they wrap, at world size 1
(issue 22's target: a Python call at most 10 us above its C call).

For each operation it times, per call, in batches (the stream synchronised between batches, outside the timing;
the median batch reported):
  python   the package's call (switchyard.MoE.dispatch, ...), buffers reused as a hot loop would;
  ctypes   the same C function called through ctypes with its arguments prepared once: the C call's host time
           plus ctypes' own cost;
  noop     a ctypes call of sy_version_code(), ctypes' cost alone;
and prints python - ctypes (what the package adds above a ctypes call) and python - (ctypes - noop) (what it
adds above the C call itself), against the 10 us target. Runs on the cuda backend on a stream of its own (and
once more on torch's default stream, where the package forks to a side stream: two event waits), or on the
host backend where there is no GPU (there the C call does the work, so only the differences mean anything).

  python tools/dev/py-overhead.py [--calls 200] [--batches 30]      # after: pip install . (torch installed)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import statistics
import time

import torch

import switchyard as sy
from switchyard._lib import INDEX_TYPES, lib

TARGET_US = 10.0


def timed(fns, calls: int, batches: int, sync) -> list[float]:
    """Per function, the median over batches of the host time of one call, in microseconds. The functions' batches
    alternate, so a drift of the machine's speed falls on each alike."""
    for fn in fns:
        for _ in range(20):
            fn()
    sync()
    per_call: list[list[float]] = [[] for _ in fns]
    for _ in range(batches):
        for fn, times in zip(fns, per_call):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            times.append((time.perf_counter_ns() - t0) / calls / 1000)
            sync()
    return [statistics.median(t) for t in per_call]


def pair(first, second):
    """Calls that must alternate (the LL object's dispatch and combine) timed together."""

    def both():
        first()
        second()

    return both


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--batches", type=int, default=30)
    args = ap.parse_args()
    comm = sy.Comm.from_env()
    if comm.world_size != 1:
        raise SystemExit("py-overhead.py: run it at world size 1 (one rank)")
    cuda = comm.backend == "cuda"
    device = f"cuda:{comm.device}" if cuda else "cpu"
    stream = torch.cuda.Stream(device) if cuda else None
    sync = (lambda: stream.synchronize()) if cuda else (lambda: None)
    handle = stream.cuda_stream if cuda else None
    rows = []

    def measure(name, python_call, c_call):
        with torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
            py, cc = timed([python_call, c_call], args.calls, args.batches, sync)
        rows.append((name, py, cc))

    # all-to-all into a symmetric tensor (no copy): 64 KiB
    send = torch.zeros(32768, dtype=torch.bfloat16, device=device)
    out = comm.empty(32768, "bf16")
    nbytes = send.numel() * 2
    measure("alltoall 64K", lambda: sy.alltoall(comm, send, out=out),
            lambda: lib.sy_alltoall(comm.handle, send.data_ptr(), out.data_ptr(), nbytes, handle))  # fmt: skip

    # MoE low latency, FP8, dispatch + combine (they alternate): 64 tokens, hidden 7168, top-8 of 64 experts on a
    # GPU; on the host backend, where the C call does the work, 4 tokens of hidden 128
    T, H, K, E = (64, 7168, 8, 64) if cuda else (4, 128, 2, 8)
    moe = sy.MoE(comm, max_tokens=T, hidden=H, top_k=K, num_experts=E, wire="fp8")
    tokens = torch.randn(T, H, device=device).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, device=device)[:K] for _ in range(T)]).to(torch.int32)
    weights = torch.rand(T, K, device=device)
    recv = moe.alloc_recv(tokens)
    y = torch.zeros((moe.local_experts, moe.slots, H), dtype=torch.bfloat16, device=device)
    combined = torch.empty(T, H, dtype=torch.bfloat16, device=device)
    rs = ctypes.byref(recv.struct())
    i32 = INDEX_TYPES["int32"]
    measure("moe dispatch+combine", pair(lambda: moe.dispatch(tokens, ids, weights, recv=recv),
                                         lambda: moe.combine(y, ids, weights, out=combined)),
            pair(lambda: lib.sy_moe_dispatch(moe.handle, tokens.data_ptr(), T, ids.data_ptr(), i32, weights.data_ptr(),
                                             rs, handle),
                 lambda: lib.sy_moe_combine(moe.handle, y.data_ptr(), ids.data_ptr(), i32, weights.data_ptr(), T,
                                            combined.data_ptr(), handle)))  # fmt: skip
    (noop,) = timed([lambda: lib.sy_version_code()], args.calls, args.batches, lambda: None)

    if cuda:  # the package's fork to a side stream when the current stream is torch's default (legacy) stream
        (py,) = timed([lambda: sy.alltoall(comm, send, out=out)], args.calls, args.batches, torch.cuda.synchronize)
        rows.append(("alltoall 64K, default stream", py, rows[0][2]))

    print(f"# py-overhead: switchyard {sy.__version__}, torch {torch.__version__}, backend {comm.backend}, device "
          f"{torch.cuda.get_device_name(comm.device) if cuda else 'cpu'}; {args.batches} batches of {args.calls} calls,"
          f" median; ctypes no-op call {noop:.2f} us")  # fmt: skip
    print(f"# {'call':<30} {'python_us':>10} {'ctypes_us':>10} {'above_ctypes':>13} {'above_C':>9}  target")
    worst = 0.0
    for name, py, cc in rows:
        per = 2 if "+" in name else 1  # two calls per timed pair
        above_c = (py - (cc - per * noop)) / per
        worst = max(worst, above_c)
        print(f"  {name:<30} {py:10.2f} {cc:10.2f} {(py - cc) / per:13.2f} {above_c:9.2f}  "
              f"{'ok' if above_c <= TARGET_US else 'OVER'} (<= {TARGET_US:g} us a call)")  # fmt: skip
    moe.close()
    comm.close()
    return 0 if worst <= TARGET_US else 1


if __name__ == "__main__":
    raise SystemExit(main())
