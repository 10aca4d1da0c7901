"""test_alltoall.py — switchyard.alltoall / alltoallv move the right bytes: each element encodes (source rank,
destination rank, index), so a misplaced or missing element shows; results are poisoned first where the test
gives them. Host backend at 1-4 ranks (numpy and torch), the cuda backend at the launcher's world size."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TIMEOUT_MS, flavours, gpu, on_host, to_dev, to_np

import switchyard as sy

try:
    import torch
except ImportError:
    torch = None


def payload(src: int, dst: int, n: int, width: int) -> np.ndarray:
    """Rows src sends dst: int32 [n, width], every element distinct."""
    i = np.arange(n * width, dtype=np.int64).reshape(n, width)
    return (src * 1_000_000 + dst * 10_000 + i).astype(np.int32)


def check_alltoall(comm: sy.Comm, flavour: str, n: int, width: int) -> None:
    r, W = comm.rank, comm.world_size
    send = np.concatenate([payload(r, p, n, width) for p in range(W)])
    want = np.concatenate([payload(s, r, n, width) for s in range(W)])
    got = sy.alltoall(comm, to_dev(comm, send, flavour))
    np.testing.assert_array_equal(to_np(got), want)
    # the same bytes as float32 (the call moves bytes; the dtype only shapes the result)
    got_f = sy.alltoall(comm, to_dev(comm, send.view(np.float32), flavour))
    np.testing.assert_array_equal(to_np(got_f).view(np.int32), want)
    # out=: a symmetric tensor is written in place; a plain one through the scratch buffer
    sym = comm.empty((W * n, width), "i32", torch=flavour == "torch")
    sym[...] = -7  # poisoned: every element must be written
    assert sy.alltoall(comm, to_dev(comm, send, flavour), out=sym) is sym
    np.testing.assert_array_equal(to_np(sym), want)
    comm.free(sym)
    plain = to_dev(comm, np.full_like(send, -7), flavour)
    assert sy.alltoall(comm, to_dev(comm, send, flavour), out=plain) is plain
    np.testing.assert_array_equal(to_np(plain), want)


def splits(W: int, seed: int) -> np.ndarray:
    """rows[s][p]: rows s sends p (zeros included), the same table on every rank."""
    return np.random.default_rng(seed).integers(0, 5, size=(W, W))


def check_alltoallv(comm: sy.Comm, flavour: str, width: int, seed: int, capacity: bool) -> None:
    r, W = comm.rank, comm.world_size
    rows = splits(W, seed)
    send = np.concatenate([payload(r, p, rows[r][p], width) for p in range(W)])
    want = np.concatenate([payload(s, r, rows[s][r], width) for s in range(W)])
    max_rows = int(rows.sum(axis=0).max()) if capacity else None
    got = sy.alltoallv(comm, to_dev(comm, send, flavour), rows[r], rows[:, r], max_recv_rows=max_rows)
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(to_np(got), want)


@pytest.mark.parametrize("flavour", flavours())
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_alltoall_host(world: int, flavour: str) -> None:
    on_host(world, check_alltoall, flavour, 3, 5)


@pytest.mark.parametrize("flavour", flavours())
@pytest.mark.parametrize("world,capacity", [(1, False), (2, True), (3, False), (4, True)])
def test_alltoallv_host(world: int, capacity: bool, flavour: str) -> None:
    on_host(world, check_alltoallv, flavour, 4, 1000 + world, capacity)


def check_bad_arguments(comm: sy.Comm) -> None:
    W = comm.world_size
    x = np.zeros((2 * W + 1, 4), np.int32)
    with pytest.raises(sy.InvalidArgError, match=r"send: .*rows do not split"):
        sy.alltoall(comm, x)
    with pytest.raises(sy.InvalidArgError, match=r"send: a torch.Tensor or numpy.ndarray is required"):
        sy.alltoall(comm, [1, 2])
    good = np.zeros((2 * W, 4), np.int32)
    with pytest.raises(sy.InvalidArgError, match=r"out: dtype float32"):
        sy.alltoall(comm, good, out=np.zeros((2 * W, 4), np.float32))
    with pytest.raises(sy.InvalidArgError, match=r"out: shape"):
        sy.alltoall(comm, good, out=np.zeros((2 * W, 3), np.int32))
    with pytest.raises(sy.InvalidArgError, match=r"send: must be contiguous"):
        sy.alltoall(comm, np.zeros((2 * W, 8), np.int32)[:, ::2])
    with pytest.raises(sy.InvalidArgError, match=r"send_splits: .*want 2 counts"):
        sy.alltoallv(comm, good, [1], [1, 1])
    with pytest.raises(sy.InvalidArgError, match=r"send_splits: sum 3 != send rows 4"):
        sy.alltoallv(comm, good, [1, 2], [2, 2])
    with pytest.raises(sy.InvalidArgError, match=r"max_recv_rows: 1 < sum\(recv_splits\) = 4"):
        sy.alltoallv(comm, good, [2, 2], [2, 2], max_recv_rows=1)
    with pytest.raises(sy.InvalidArgError, match=r"max_recv_rows: 4.0, want an int"):
        sy.alltoallv(comm, good, [2, 2], [2, 2], max_recv_rows=4.0)
    if torch is not None:  # refused before the call, not after it (the copy into out)
        with pytest.raises(sy.InvalidArgError, match=r"out: a Tensor for a ndarray send"):
            sy.alltoall(comm, good, out=torch.zeros(tuple(good.shape), dtype=torch.int32))
        with pytest.raises(sy.InvalidArgError, match=r"out: a ndarray for a Tensor send"):
            sy.alltoallv(comm, torch.from_numpy(good), [2, 2], [2, 2], out=good.copy())
        sym = comm.empty(tuple(good.shape), "i32", torch=True)  # received in place, no copy: any mix
        assert sy.alltoall(comm, good, out=sym) is sym
    with pytest.raises(sy.InvalidArgError, match=r"dtype: 'x'"):
        comm.empty(4, "x")
    with pytest.raises(sy.InvalidArgError, match=r"tensor: .* is not a symmetric allocation"):
        comm.free(good)
    # still in step: a good call after the rejected ones
    np.testing.assert_array_equal(sy.alltoall(comm, good), good)


def test_bad_arguments_host() -> None:
    on_host(2, check_bad_arguments)


def check_mismatch(comm: sy.Comm) -> None:
    """Rank 1 expects one row too many from rank 0: the host backend refuses the call on every rank."""
    send = np.arange(4, dtype=np.int32).reshape(4, 1)
    recv_splits = [2, 2] if comm.rank == 0 else [3, 2]
    with pytest.raises(sy.MismatchError) as e:
        sy.alltoallv(comm, send, [2, 2], recv_splits, max_recv_rows=5)
    assert e.value.name == "SY_ERR_MISMATCH" and e.value.call == "sy_alltoallv"


def test_mismatch_host() -> None:
    on_host(2, check_mismatch)


def check_after_failed_grow(comm: sy.Comm) -> None:
    """A scratch buffer whose grow failed is not used again: the grow frees the old buffer first, and a later call
    (of a size the old one held, or larger) allocates afresh instead of handing the library the freed address."""
    W, r = comm.world_size, comm.rank

    def send_want(n: int) -> tuple[np.ndarray, np.ndarray]:
        return (np.concatenate([payload(r, p, n, 4) for p in range(W)]),
                np.concatenate([payload(s, r, n, 4) for s in range(W)]))  # fmt: skip

    good, want = send_want(2)
    np.testing.assert_array_equal(sy.alltoall(comm, good), want)
    with pytest.raises(sy.InvalidArgError, match=r"exceeds the symmetric heap"):  # refused on every rank
        sy.alltoall(comm, np.zeros((W, 1 << 20), np.int32))
    np.testing.assert_array_equal(sy.alltoall(comm, good), want)
    big, want_big = send_want(64)
    np.testing.assert_array_equal(sy.alltoall(comm, big), want_big)

    rows = [2] * W
    np.testing.assert_array_equal(sy.alltoallv(comm, good, rows, rows, max_recv_rows=2 * W), want)
    with pytest.raises(sy.MismatchError):  # the ranks disagree on the new size: nothing allocated
        sy.alltoallv(comm, good, rows, rows, max_recv_rows=4 * W + r)
    np.testing.assert_array_equal(sy.alltoallv(comm, good, rows, rows, max_recv_rows=2 * W), want)


def test_after_failed_grow_host() -> None:
    sy.host_ranks(2, check_after_failed_grow, timeout_ms=TIMEOUT_MS, heap_bytes=1 << 20)


@gpu
@pytest.mark.parametrize("n,width", [(1, 4), (64, 1024)])
def test_alltoall_gpu(gpu_comm: sy.Comm, n: int, width: int) -> None:
    check_alltoall(gpu_comm, "torch", n, width)


@gpu
def test_alltoallv_gpu(gpu_comm: sy.Comm) -> None:
    check_alltoallv(gpu_comm, "torch", 256, 7, capacity=False)
    check_alltoallv(gpu_comm, "torch", 256, 8, capacity=True)


@gpu
def test_alltoall_gpu_graph(gpu_comm: sy.Comm) -> None:
    """Captured in torch.cuda.graph (after a warm-up call sized the scratch), replayed with new inputs."""
    import torch

    r, W = gpu_comm.rank, gpu_comm.world_size
    n, width = 8, 64
    send = to_dev(gpu_comm, np.concatenate([payload(r, p, n, width) for p in range(W)]), "torch")
    sy.alltoall(gpu_comm, send)  # warm-up: the scratch buffer's collective allocation
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sy.alltoall(gpu_comm, send)
    for step in range(3):
        send.copy_(to_dev(gpu_comm, np.concatenate([payload(r, p, n, width) + step for p in range(W)]), "torch"))
        graph.replay()
        want = np.concatenate([payload(s, r, n, width) + step for s in range(W)])
        np.testing.assert_array_equal(to_np(out), want)


@gpu
def test_tensor_of_another_stream_waits_for_the_call(gpu_comm: sy.Comm) -> None:
    """A tensor made on stream a and given to a call on stream b: once it dies, torch's caching allocator must not
    hand its memory to a new tensor of stream a before b's call is done (the package marks it, Comm._used). b is
    held asleep so the call cannot have ended when the new tensor is made."""
    import torch

    W = gpu_comm.world_size
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(a):
        send = torch.ones(W * 1024, 64, device="cuda")
    b.wait_stream(a)
    with torch.cuda.stream(b):
        torch.cuda._sleep(100_000_000)  # ~50 ms at the H100's clock
        out = sy.alltoall(gpu_comm, send)
    ptr = send.data_ptr()
    del send
    with torch.cuda.stream(a):
        again = torch.empty(W * 1024, 64, device="cuda")
    reused = again.data_ptr() == ptr
    b.synchronize()
    assert not reused, "the memory of a tensor a call on another stream still reads went to a new tensor"
    assert torch.equal(out.cpu(), torch.ones(W * 1024, 64))
