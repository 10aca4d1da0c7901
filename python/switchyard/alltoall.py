"""alltoall.py — sy_alltoall and sy_alltoallv over tensors.

The library's receive buffer must be symmetric memory (sy_mem_alloc: peers write it). A result is therefore
received into the communicator's scratch buffer and copied (stream-ordered) into a fresh tensor, or received
in place when `out` is a symmetric tensor of the communicator (`Comm.empty`): no copy. The scratch buffer grows
by a collective allocation, so the first call of a size must not be inside a CUDA graph capture (warm up
first, as torch.cuda.graph's users do anyway).
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any, Sequence

from . import _arrays
from ._lib import lib
from .comm import Comm
from .errors import check, invalid

_ANY = ("bf16", "f16", "f32", "f64", "i32", "i64", "u8", "e4m3")


def _check_send(comm: Comm, send: Any, call: str) -> str:
    """Checks send; returns its kind."""
    _arrays.check(send, "send", call, _ANY, device=comm._where)
    if len(send.shape) < 1:
        raise invalid("send", "at least one dimension (rows) is required", call)
    return _arrays.kind_of(send, _ANY)


def _check_out(comm: Comm, out: Any, send: Any, kind: str, shape: tuple, call: str) -> bool:
    """Checks out (None: none); returns whether the library writes it in place (a symmetric tensor of comm)."""
    if out is None:
        return False
    _arrays.check(out, "out", call, kind, shape=shape, device=comm._where)
    if comm.is_symmetric(out):
        return True
    if _arrays.is_torch(out) != _arrays.is_torch(send):  # refused here: the copy into out would fail after the call
        raise invalid("out", f"a {type(out).__name__} for a {type(send).__name__} send: the copy into out needs both "
                      "torch tensors or both numpy arrays (or out a symmetric tensor of comm)", call)  # fmt: skip
    return False


def alltoall(comm: Comm, send: Any, *, out: Any = None, stream: Any = None) -> Any:
    """Collective, stream-ordered, graph-capturable once warmed up (sy_alltoall). send: [world_size * n, ...]
    (dtype bf16, f16, f32, f64, i32, i64, u8 or e4m3, numpy holding bf16 as uint16 and e4m3 as uint8 bits;
    contiguous, on the communicator's device): rows [p*n, (p+1)*n) go to rank p, where they arrive as rows [r*n,
    (r+1)*n) of the result (r: this rank). Returns `out` (same shape and dtype as send; written in
    place without a copy when it is a symmetric tensor of comm) or a new tensor."""
    call = "switchyard.alltoall"
    kind = _check_send(comm, send, call)
    world = comm.world_size
    if send.shape[0] % world:
        raise invalid("send", f"{send.shape[0]} rows do not split over world_size={world}", call)
    size = _arrays.nbytes(send)
    direct = _check_out(comm, out, send, kind, tuple(send.shape), call)
    result = out if out is not None else _arrays.empty(send.shape, kind, send)
    if size == 0:
        return result
    recv = _arrays.ptr(out) if direct else comm.scratch("alltoall", size)
    handle, join = comm._stream(stream)
    check(lib.sy_alltoall(comm.handle, _arrays.ptr(send), recv, size // world, handle), "sy_alltoall", comm._handle)
    comm._used(handle, stream, (send, out), (result,) if out is None else ())
    comm._join(join)
    if not direct:
        view = _arrays.wrap(recv, size, send.shape, kind, comm._where, _arrays.is_torch(send))
        with comm._on(stream):
            _arrays.copy_into(result, view)
    return result


def _splits(value: Sequence[int], name: str, world: int, call: str) -> list[int]:
    try:
        out = [int(v) for v in value]
    except (TypeError, ValueError):
        raise invalid(name, f"a sequence of {world} row counts is required", call) from None
    if len(out) != world or any(v < 0 for v in out):
        raise invalid(name, f"{list(out)}: want {world} counts >= 0", call)
    return out


def alltoallv(
    comm: Comm,
    send: Any,
    send_splits: Sequence[int],
    recv_splits: Sequence[int],
    *,
    out: Any = None,
    max_recv_rows: int | None = None,
    stream: Any = None,
) -> Any:
    """Collective, stream-ordered (sy_alltoallv) in rows of send's first dimension: send_splits[p] rows go to
    rank p (send packed in rank order), recv_splits[s] rows arrive from rank s, packed in rank order into the
    result ([sum(recv_splits), ...]). recv_splits[s] here must equal send_splits[r] at s (else
    MismatchError). The receive buffer is symmetric and so the same size on every rank: give max_recv_rows (the
    same on every rank, >= every rank's sum(recv_splits)), or leave it None and the ranks agree on it through a
    host-side allgather in this call (not capturable, slower). out: as in alltoall."""
    call = "switchyard.alltoallv"
    kind = _check_send(comm, send, call)
    world = comm.world_size
    sends = _splits(send_splits, "send_splits", world, call)
    recvs = _splits(recv_splits, "recv_splits", world, call)
    rows = int(send.shape[0])
    if sum(sends) != rows:
        raise invalid("send_splits", f"sum {sum(sends)} != send rows {rows}", call)
    row_bytes = _arrays.nbytes(send) // rows if rows else 0
    if rows == 0:
        row_bytes = _arrays._NUMPY[kind].itemsize
        for d in send.shape[1:]:
            row_bytes *= int(d)
    shape = (sum(recvs),) + tuple(send.shape[1:])
    direct = _check_out(comm, out, send, kind, shape, call)
    result = out if out is not None else _arrays.empty(shape, kind, send)
    if max_recv_rows is not None:
        if isinstance(max_recv_rows, bool) or not hasattr(type(max_recv_rows), "__index__"):
            raise invalid("max_recv_rows", f"{max_recv_rows!r}, want an int (rows) or None", call)
        max_recv_rows = operator.index(max_recv_rows)
    if max_recv_rows is None:
        mine = sum(recvs).to_bytes(8, "little")
        max_recv_rows = max(int.from_bytes(b, "little") for b in comm.allgather_host(mine))
    elif max_recv_rows < sum(recvs):
        raise invalid("max_recv_rows", f"{max_recv_rows} < sum(recv_splits) = {sum(recvs)}", call)
    recv = _arrays.ptr(out) if direct else comm.scratch("alltoallv", max(1, max_recv_rows * row_bytes))
    Sizes = ctypes.c_size_t * world
    offsets_s = [0] * world
    offsets_r = [0] * world
    for p in range(1, world):
        offsets_s[p] = offsets_s[p - 1] + sends[p - 1] * row_bytes
        offsets_r[p] = offsets_r[p - 1] + recvs[p - 1] * row_bytes
    handle, join = comm._stream(stream)
    status = lib.sy_alltoallv(comm.handle, _arrays.ptr(send), Sizes(*[s * row_bytes for s in sends]),
                              Sizes(*offsets_s), recv, Sizes(*[r * row_bytes for r in recvs]), Sizes(*offsets_r),
                              handle)  # fmt: skip
    check(status, "sy_alltoallv", comm._handle)
    comm._used(handle, stream, (send, out), (result,) if out is None else ())
    comm._join(join)
    if not direct and shape[0]:
        view = _arrays.wrap(recv, shape[0] * row_bytes, shape, kind, comm._where, _arrays.is_torch(send))
        with comm._on(stream):
            _arrays.copy_into(result, view)
    return result
