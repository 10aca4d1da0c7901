"""test_process_group.py — Comm.from_process_group over groups other than the default one, without a GPU (gloo):
in one process, a subgroup of the one-rank world; in three processes (torch.multiprocessing, spawned), the
subgroup {0, 2}: its allgather (the cuda backend's bootstrap) carries bytes in the group's rank order through the
library's function type and back, a member's Comm on the host backend is refused naming the backend (its ranks
are threads of one process), the non-member is refused naming the group, and a failing allgather is the
library call's error, with the Python exception as its cause. The cuda backend's run of the same (NVSHMEM's
unique id through the group) needs GPUs; the C side of the caller's allgather is tests/unit/test_boot_caller.c."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import switchyard as sy
from switchyard import comm as comm_module
from switchyard import errors

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402


def test_subgroup_one_process(monkeypatch) -> None:
    monkeypatch.setenv("SY_BACKEND", "host")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        sub = dist.new_group([0])
        with sy.Comm.from_process_group(sub) as comm:
            assert (comm.rank, comm.world_size, comm.backend) == (0, 1, "host")
            np.testing.assert_array_equal(sy.alltoall(comm, np.arange(6)), np.arange(6))
        gathered = comm_module.group_allgather(sub)(b"only")
        assert gathered == [b"only"]
    finally:
        dist.destroy_process_group()


def call_through_c(boot: comm_module._Allgather, data: bytes, world: int) -> tuple[int, bytes]:
    """Calls the allgather the way the library does: through its sy_allgather_fn pointer, on raw buffers."""
    fn = ctypes.cast(boot.fn, ctypes.c_void_p).value
    c_fn = comm_module.ALLGATHER_FN(fn)
    send = ctypes.create_string_buffer(data, len(data))
    recv = ctypes.create_string_buffer(len(data) * world)
    status = c_fn(None, ctypes.addressof(send), ctypes.addressof(recv), len(data))
    return status, recv.raw


def rank_main(rank: int, store_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_dir}/store", rank=rank, world_size=3)
    try:
        group = dist.new_group([0, 2])  # every process takes part in making it
        if rank == 1:
            with pytest.raises(sy.InvalidArgError, match=r"group: this process \(global rank 1\) is not a member"):
                sy.Comm.from_process_group(group, backend="host")
            return
        me = dist.get_rank(group)
        assert me == rank // 2
        boot = comm_module._Allgather(comm_module.group_allgather(group), 2)
        status, raw = call_through_c(boot, bytes([10 * rank + i for i in range(5)]), 2)
        assert status == 0 and raw == bytes([0, 1, 2, 3, 4, 20, 21, 22, 23, 24]), raw
        # ranks that disagree on the byte count: each side's function fails, and says which rank gave what
        status, _ = call_through_c(boot, b"x" * (3 + me), 2)
        assert status == 1
        kept = errors.take_callback_error()
        assert isinstance(kept, ValueError) and "gave" in str(kept), kept
        with pytest.raises(sy.InvalidArgError, match=r"backend: the host backend runs ranks as threads .* 2 processes"):
            sy.Comm.from_process_group(group, backend="host")
    finally:
        dist.destroy_process_group()


def test_subgroup_three_processes(tmp_path) -> None:
    torch.multiprocessing.spawn(rank_main, args=(str(tmp_path),), nprocs=3, join=True)


def test_allgather_failure_is_the_calls_cause() -> None:
    def broken(data: bytes) -> list[bytes]:
        raise ConnectionError("the group is gone")

    boot = comm_module._Allgather(broken, 2)
    status, _ = call_through_c(boot, b"abcd", 2)
    assert status == 1
    with pytest.raises(sy.BootstrapError) as e:  # what the library's call then raises
        errors.raise_status(-6, "sy_mem_alloc")
    assert isinstance(e.value.__cause__, ConnectionError)
    with pytest.raises(sy.InvalidArgError, match="allgather: int is not callable"):
        sy.Comm(backend="host", rank=0, world_size=1, allgather=3)
