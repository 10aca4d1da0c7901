"""test_process_group.py — Comm.from_process_group over groups other than the default one, without a GPU (gloo):
in one process, a subgroup of the one-rank world; in three processes (torch.multiprocessing, spawned), the
subgroup {0, 2}: its allgather (the cuda backend's bootstrap) carries bytes in the group's rank order through the
library's function type and back, a member's Comm on the host backend is refused naming the backend (its ranks
are threads of one process), the non-member is refused naming the group, and a failing allgather is the
library call's error, with the Python exception as its cause. On GPUs (test_subgroups_cuda), four processes make
the two groups {0, 2} and {1, 3} (NCCL's process group where each has a GPU of its own, else gloo) and each group
brings up a cuda communicator of its own (NVSHMEM's unique id through the group): an all-to-all and a MoE
high-throughput round trip over each, checked bit for bit. The C side of the caller's allgather is
tests/unit/test_boot_caller.c."""

from __future__ import annotations

import ctypes
import os
import time
from datetime import timedelta

import numpy as np
import pytest

from conftest import TIMEOUT_MS, gpu

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


def cuda_rank_main(rank: int, store_dir: str, pg_backend: str) -> None:
    """One of four processes: groups {0, 2} and {1, 3}, a cuda communicator over each (the group's rank order)."""
    for name in ("SY_RANK", "SY_WORLD_SIZE", "SY_LOCAL_RANK", "SY_LOCAL_SIZE", "SY_BOOT_DIR", "SY_DEVICE"):
        os.environ.pop(name, None)  # not a rank of the launcher that ran pytest
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(pg_backend, init_method=f"file://{store_dir}/store", rank=rank, world_size=4,
                            timeout=timedelta(seconds=120))  # fmt: skip
    try:
        groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]  # every process makes both, in the same order
        with sy.Comm.from_process_group(groups[rank % 2], backend="cuda", timeout_ms=TIMEOUT_MS) as comm:
            assert (comm.rank, comm.world_size, comm.backend) == (rank // 2, 2, "cuda"), (comm.rank, comm.backend)
            n, cols = 3, 5  # rows [p n, (p + 1) n) to group rank p; each value names its sender and receiver
            send = torch.tensor([[100 * rank + 10 * p + j for j in range(cols)] for p in range(2) for _ in range(n)],
                                dtype=torch.int32, device="cuda")  # fmt: skip
            got = sy.alltoall(comm, send).cpu()
            torch.cuda.synchronize()
            for s in range(2):  # group rank s is global rank 2 s + rank % 2
                want = [[100 * (2 * s + rank % 2) + 10 * comm.rank + j for j in range(cols)]] * n
                assert got[s * n:(s + 1) * n].tolist() == want, (rank, s, got)
            from test_moe_ht import Case, check_ht

            check_ht(comm, Case(2, 8, 3, 512, 16, "bf16", 16, "exact", 90 + rank % 2), "torch")
    finally:
        dist.destroy_process_group()


@gpu
def test_subgroups_cuda(tmp_path) -> None:
    if comm_module._launcher_world() > 1:
        pytest.skip("spawns four processes of its own: runs where pytest is one process (syrun -n 1)")
    pg_backend = "nccl" if torch.cuda.device_count() >= 4 else "gloo"  # NCCL wants a GPU a rank
    ctx = torch.multiprocessing.spawn(cuda_rank_main, args=(str(tmp_path), pg_backend), nprocs=4, join=False)
    deadline = time.monotonic() + 300  # bounded: a wedged bring-up fails the test instead of hanging it
    while not ctx.join(timeout=5):  # raises when a child fails
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.terminate()
            pytest.fail("test_subgroups_cuda: the four processes did not finish within 300 s")
