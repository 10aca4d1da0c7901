"""test_errors.py — exceptions: one class per sy_status_t with the library's names, arguments the package checks
named in the message, the library's own refusals raised with the C call, the status and the library's line naming
the argument (sy_last_error), a timed-out wait raised with the wait's line and the communicator's description (and
sticky, the refusal saying why), and the launcher helpers' argument checks."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import on_host

import switchyard as sy
from switchyard import errors


def test_status_classes() -> None:
    for cls in errors._BY_STATUS.values():
        assert sy.status_name(cls.status) == cls.name
        assert sy.status_string(cls.status)  # the library's sentence fragment
        assert issubclass(cls, sy.Error)
    assert sy.status_name(0) == "SY_SUCCESS" and sy.status_name(-999) == "SY_UNKNOWN_STATUS"
    assert issubclass(sy.InvalidArgError, ValueError) and issubclass(sy.TimeoutError, TimeoutError)
    e = sy.InvalidArgError("sy_x", "what")
    assert (e.status, e.name, e.call, e.detail) == (-1, "SY_ERR_INVALID_ARG", "sy_x", "what")
    assert str(e) == "sy_x: SY_ERR_INVALID_ARG (invalid argument): what"
    unknown = sy.Error("sy_y", status=-99)
    assert unknown.name == "SY_UNKNOWN_STATUS" and unknown.status == -99


def test_comm_arguments() -> None:
    with pytest.raises(sy.InvalidArgError, match=r"backend: 'gpu', want one of"):
        sy.Comm(backend="gpu")
    with pytest.raises(sy.InvalidArgError, match=r"rank: an int is required, got str"):
        sy.Comm(backend="host", rank="0", world_size=1)
    # the library's own check: a host-backend rank must say who it is; its line names the argument
    with pytest.raises(sy.InvalidArgError) as e:
        sy.Comm(backend="host")
    assert e.value.call == "sy_comm_init"
    assert e.value.log_line.startswith("sy_comm_init: invalid argument: config->rank=-1: the host backend runs ranks")
    assert str(e.value).startswith("sy_comm_init: SY_ERR_INVALID_ARG (invalid argument): config->rank=-1: the host")
    assert e.value.detail == e.value.log_line[len("sy_comm_init: invalid argument: ") :]
    assert errors.last_error() == e.value.log_line  # what the library still says on this thread
    with pytest.raises(sy.InvalidArgError, match=r"world_size: 0: an int >= 1 is required"):
        sy.host_ranks(0, lambda comm: None)
    with pytest.raises(sy.InvalidArgError, match=r"fn: int is not callable"):
        sy.host_ranks(1, 3)


def test_failure_in_one_rank() -> None:
    """A rank's own exception, not the timeouts it causes in its peers, comes back from host_ranks."""

    def fn(comm):
        if comm.rank == 1:
            raise KeyError("rank 1's own failure")
        sy.alltoall(comm, np.zeros((2, 1), np.int32))

    with pytest.raises(KeyError, match="rank 1's own failure"):
        sy.host_ranks(2, fn, timeout_ms=300)


def check_timeout(comm: sy.Comm) -> None:
    if comm.rank == 1:
        time.sleep(1.5)  # never enters the barrier: rank 0's wait ends at the bound
        return
    with pytest.raises(sy.TimeoutError) as e:
        comm.barrier()
    assert e.value.name == "SY_ERR_TIMEOUT" and e.value.call == "sy_comm_barrier"
    status, detail = comm.async_error()
    assert status == "SY_ERR_TIMEOUT" and detail, (status, detail)
    assert "barrier" in e.value.log_line and "missing: 1" in e.value.log_line, e.value.log_line  # the wait's line
    assert detail in str(e.value)  # the communicator's description, once
    with pytest.raises(sy.Error) as again:  # sticky: every later call that would do work refuses
        comm.barrier()
    assert again.value.status in (-5, -10)
    assert again.value.log_line.startswith("sy_comm_barrier: refused: the communicator failed earlier: SY_ERR_")


def test_timeout_host() -> None:
    sy.host_ranks(2, check_timeout, timeout_ms=300)


def test_closed() -> None:
    def fn(comm):
        comm.close()
        comm.close()  # idempotent
        with pytest.raises(sy.InvalidArgError, match="the communicator is closed"):
            comm.handle
        return repr(comm)

    assert "closed" in on_host(1, fn)[0]


def test_from_env_and_process_group_host(monkeypatch) -> None:
    """Without a GPU: from_env is one host rank; a launcher of several processes is refused on the host backend
    (its ranks are threads); from_process_group takes the default group's rank and size."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    # a launcher's own variables (the GPU tests run under syrun) would name its world, not this test's
    for name in ("SY_WORLD_SIZE", "SY_RANK", "WORLD_SIZE", "RANK", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SY_BACKEND", "host")
    with sy.Comm.from_env() as comm:
        assert (comm.rank, comm.world_size, comm.backend) == (0, 1, "host")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(sy.InvalidArgError, match=r"backend: the host backend runs ranks as threads"):
        sy.Comm.from_env()
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(sy.InvalidArgError, match=r"group: torch.distributed is not initialised"):
        sy.Comm.from_process_group()
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        with sy.Comm.from_process_group(backend="host") as comm:
            assert (comm.rank, comm.world_size) == (0, 1)
            np.testing.assert_array_equal(sy.alltoall(comm, np.arange(4)), np.arange(4))
    finally:
        dist.destroy_process_group()
