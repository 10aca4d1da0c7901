"""test_orchestration.py — the orchestration objects (switchyard.Pool, HostPool, GraphCache) and the stream-ordered
plan upload (AttnPlan(ordered=True)) against the header's words: a pool's tensors are its memory (written and read
back, its counts in stats, a pointer it never gave out or took back already refused by the library, naming it);
slots come back at once on the host backend and are refused when not acquired; a graph cache runs its Python step
for the smallest bucket >= n (vLLM's buckets by default), counts its runs, refuses n beyond its buckets, and gives
back an exception of the step as it was raised; an ordered plan is the same plan. Host backend at 1 and 2 ranks;
the cuda backend (Pool on torch's stream, a captured step replayed, a step that allocates refused) under syrun."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import flavours, gpu, on_host, torch

import switchyard as sy


def check_pool(comm: sy.Comm, flavour: str) -> None:
    use_torch = flavour == "torch"
    with sy.Pool(comm) as pool:
        a = pool.alloc((3, 5), "f32", torch=use_torch)
        b = pool.alloc(1000, "bf16", torch=use_torch)
        assert tuple(a.shape) == (3, 5) and tuple(b.shape) == (1000,)
        assert (a.data_ptr() if use_torch else a.ctypes.data) % 256 == 0
        values = np.arange(15, dtype=np.float32).reshape(3, 5) + comm.rank
        a[...] = torch.from_numpy(values) if use_torch else values
        assert np.array_equal(a.numpy() if use_torch else a, values)
        s = pool.stats()
        assert (s.allocs, s.frees, s.live) == (2, 0, 2)
        assert s.used == 256 + 2048 and s.used_high == s.used and s.reserved == s.used  # host: rounded to 256
        pool.free(a)
        with pytest.raises(sy.InvalidArgError) as e:  # freed already: the library refuses and names it
            pool.free(a)
        assert e.value.call == "sy_pool_free" and "is not a live allocation of this pool" in str(e.value)
        assert e.value.log_line.startswith("sy_pool_free: invalid argument: ptr=")
        pool.trim(0)
        s = pool.stats()
        assert (s.allocs, s.frees, s.live, s.used, s.used_high) == (2, 1, 1, 2048, 256 + 2048)
        with pytest.raises(sy.InvalidArgError, match=r"shape: \(0, 4\): an allocation needs at least one byte"):
            pool.alloc((0, 4))
        with pytest.raises(sy.InvalidArgError, match=r"dtype: 'f8', want one of"):
            pool.alloc(4, "f8")
        # b is left to close(), which frees it (the library warns)
    with pytest.raises(sy.Error, match="the object is closed"):
        pool.stats()


@pytest.mark.parametrize("flavour", flavours())
def test_pool_host(flavour: str) -> None:
    on_host(2, check_pool, flavour)


def check_host_pool(comm: sy.Comm) -> None:
    with sy.HostPool(comm, slot_bytes=64, slots=2) as staging:
        one = staging.acquire(torch=False)
        two = staging.acquire(torch=False)
        assert one.shape == (64,) and one.dtype == np.uint8 and one.ctypes.data != two.ctypes.data
        one[:] = 7  # pinned memory the caller writes
        s = staging.stats()
        assert (s.slots, s.free_slots, s.acquires) == (2, 0, 2)
        staging.release(one)  # host backend: back at once, with or without a stream
        staging.release(two, now=True)
        assert staging.stats().free_slots == 2
        with pytest.raises(sy.InvalidArgError) as e:
            staging.release(two)
        assert e.value.call == "sy_host_pool_release" and e.value.log_line.startswith("sy_host_pool_release: ")
        with pytest.raises(sy.InvalidArgError, match="now: True with a stream"):
            staging.release(one, now=True, stream=1)
    with pytest.raises(sy.InvalidArgError, match=r"slots: 0: an int >= 1 is required"):
        sy.HostPool(comm, slot_bytes=64, slots=0)
    with pytest.raises(sy.InvalidArgError) as e:  # the library's own limit, named by its line
        sy.HostPool(comm, slot_bytes=64, slots=5000)
    assert e.value.call == "sy_host_pool_create" and "slots" in e.value.detail, e.value


def test_host_pool_host() -> None:
    on_host(1, check_host_pool)


def check_graph_cache(comm: sy.Comm) -> None:
    seen: list[tuple[int, object]] = []
    with sy.GraphCache(comm, lambda bucket, stream: seen.append((bucket, stream))) as cache:  # vLLM's buckets
        assert [cache.bucket(n) for n in (1, 3, 4, 5, 9, 256, 257, 500, 512)] == [1, 4, 4, 8, 16, 256, 272, 512, 512]
        for n in (3, 3, 100):
            cache.run(n)
        assert seen == [(4, None), (4, None), (104, None)]  # the host backend runs the step every time
        assert cache.stats() == sy.GraphStats(eager_runs=3, captures=0, updates=0, instantiations=0, replays=0,
                                              graphs=0)  # fmt: skip
        with pytest.raises(sy.InvalidArgError) as e:
            cache.run(513)
        assert e.value.call == "sy_graph_cache_run" and "n=513 outside [1, 512]" in str(e.value)
        cache.refresh()
        cache.refresh(7)

    calls = []

    def step(bucket: int, stream: object) -> None:
        calls.append(bucket)
        if bucket == 32:
            raise KeyError("the step's own failure")

    cache = sy.GraphCache(comm, step, buckets=[2, 8, 32], warmup=0)
    cache.run(5)
    with pytest.raises(KeyError, match="the step's own failure"):
        cache.run(20)
    cache.run(1)  # the cache goes on after a failed run
    assert calls == [8, 32, 2] and cache.stats().eager_runs == 2
    with pytest.raises(sy.InvalidArgError, match=r"n=33 outside \[1, 32\]"):
        cache.bucket(33)
    cache.close()
    with pytest.raises(sy.InvalidArgError, match=r"buckets: 0: an int >= 1 is required"):
        sy.GraphCache(comm, step, buckets=[0, 4])
    with pytest.raises(sy.InvalidArgError) as e:  # not ascending: the library's check
        sy.GraphCache(comm, step, buckets=[4, 2])
    assert e.value.call == "sy_graph_cache_create" and e.value.log_line
    with pytest.raises(sy.InvalidArgError, match="step: int is not callable"):
        sy.GraphCache(comm, 3)


def test_graph_cache_host() -> None:
    on_host(1, check_graph_cache)


def check_ordered_plan(comm: sy.Comm) -> None:
    W = comm.world_size
    kv_dst = [[[r, -1], [(r + 1) % W, r]] for r in range(W)]  # sequence 1 on two ranks
    d = sy.Description([[5, 3]] * W, [[(r + 1) % W, r] for r in range(W)], kv_dst, 2)
    fields = ("num_tokens", "q_recv_rows", "kv_recv_rows", "fingerprint", "q_recv", "kv_recv", "q_send", "kv_send")
    with sy.AttnPlan(comm, d) as plan:
        want = [getattr(plan, f) for f in fields]
    with sy.Pool(comm) as pool, sy.HostPool(comm, slot_bytes=4096) as staging:
        for kwargs in ({}, {"pool": pool, "staging": staging}):
            plan = sy.AttnPlan(comm, d, ordered=True, **kwargs)
            assert [getattr(plan, f) for f in fields] == want
            plan.close(stream=0)  # sy_attn_plan_destroy_async (the host backend ignores the stream)
            plan.close()
    with pytest.raises(sy.InvalidArgError, match="ordered: pool, staging and stream are for the stream-ordered"):
        sy.AttnPlan(comm, d, pool=pool)
    with pytest.raises(sy.InvalidArgError, match="pool: a switchyard object is required, got int"):
        sy.AttnPlan(comm, d, ordered=True, pool=3)


def test_ordered_plan_host() -> None:
    on_host(2, check_ordered_plan)


# ---- the cuda backend --------------------------------------------------------------------------------------------


@gpu
def test_pool_gpu(gpu_comm) -> None:
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), sy.Pool(gpu_comm) as pool:
        x = pool.alloc((256, 4), "f32")
        assert x.is_cuda and x.get_device() == gpu_comm.device
        x.copy_(torch.arange(1024, dtype=torch.float32, device=x.device).view(256, 4))
        assert torch.equal(x.cpu(), torch.arange(1024, dtype=torch.float32).view(256, 4))
        pool.free(x)
        assert pool.stats().live == 0
        torch.cuda.synchronize()


@gpu
def test_graph_cache_gpu(gpu_comm) -> None:
    """A step that writes only into tensors made before: captured once per bucket, then replayed."""
    acc = torch.zeros(64, device=f"cuda:{gpu_comm.device}")
    ones = torch.ones(64, device=acc.device)

    def step(bucket: int, stream) -> None:
        acc[:bucket].add_(ones[:bucket])

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        cache = sy.GraphCache(gpu_comm, step, buckets=[8, 64], warmup=1)
        for n in (5, 5, 5, 40):
            cache.run(n)
        stream.synchronize()
        want = torch.zeros(64)
        want[:8] += 4  # bucket 8: a warm-up and three launches (a capture runs nothing)
        want[:64] += 2  # bucket 64: a warm-up and one launch
        assert torch.equal(acc.cpu(), want), acc
        s = cache.stats()
        assert (s.captures, s.replays, s.graphs, s.eager_runs) == (2, 4, 2, 2)

        def allocating(bucket: int, stream) -> None:
            acc.copy_(acc + 1)  # acc + 1 allocates while captured

        bad = sy.GraphCache(gpu_comm, allocating, buckets=[8], warmup=1)
        with pytest.raises(sy.InvalidArgError, match="allocated torch memory while captured"):
            bad.run(8)
        bad.close()
        cache.close()
        stream.synchronize()
