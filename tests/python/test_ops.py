"""test_ops.py — the custom ops (switchyard::alltoall, ::moe_dispatch, ::moe_combine): the same results as the
package's calls, torch.library.opcheck's checks of their registration (schema, fake tensors, autograd
registration), and torch.compile keeping them opaque: a fullgraph compile whose graph holds each op as one node.
Host backend (CPU tensors): the tracing checks (opcheck, fake tensors, compile) at 1 rank in the main thread, since
torch 2.11 crashes (a segmentation fault in FakeTensorMode) when they run in another thread, and the host
backend's ranks are threads; the ops themselves at 2 ranks. The cuda backend, a process per rank, runs them all
at the launcher's world size."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpu, on_host, on_this_thread, to_dev, to_np

import switchyard as sy

torch = pytest.importorskip("torch", reason="the custom ops need torch")
from switchyard import ops  # noqa: E402

OPS = torch.ops.switchyard


def compiled_targets(fn):
    """torch.compile(fn, fullgraph=True) with a backend that records the graph's call targets, then runs it."""
    seen: list = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target).removesuffix(".default") for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    return torch.compile(fn, backend=backend, fullgraph=True), seen


def check_alltoall_op(comm: sy.Comm, tracing: bool) -> None:
    r, W = comm.rank, comm.world_size
    cid = ops.register(comm)
    x = to_dev(comm, (np.arange(W * 6, dtype=np.float32).reshape(W * 3, 2) + 100 * r), "torch")
    want = to_np(sy.alltoall(comm, x))
    np.testing.assert_array_equal(to_np(OPS.alltoall(x, cid)), want)
    if tracing:
        torch.library.opcheck(OPS.alltoall.default, (x, cid))
        fn, seen = compiled_targets(lambda t: OPS.alltoall(t * 2, cid) + 1)
        np.testing.assert_array_equal(to_np(fn(x)), to_np(sy.alltoall(comm, x * 2) + 1))
        assert "switchyard.alltoall" in seen, seen


def check_moe_ops(comm: sy.Comm, tracing: bool) -> None:
    r, W = comm.rank, comm.world_size
    E, K, H, T = 2 * W, 2, 128, 4
    moe = sy.MoE(comm, max_tokens=T, hidden=H, top_k=K, num_experts=E, wire="bf16")
    mid = ops.register(moe)
    rng = np.random.default_rng(7 + r)
    ids = to_dev(comm, np.stack([rng.permutation(E)[:K] for _ in range(T)]).astype(np.int32), "torch")
    tokens = to_dev(comm, rng.integers(-4, 5, size=(T, H)).astype(np.float32), "torch").to(torch.bfloat16)
    weights = to_dev(comm, rng.choice(np.array([0.5, 1, 2], np.float32), size=(T, K)), "torch")

    def layer(tok, idx, w):
        recv_tokens, _, _, _, _ = OPS.moe_dispatch(tok, idx, w, mid)
        return OPS.moe_combine(recv_tokens * 2, idx, w, mid)

    # the object's calls alternate dispatch, combine, dispatch, ... (switchyard.h, "Halves"), so each op runs
    # once between the other's runs; opcheck, which runs an op several times in a row, does not apply
    recv = moe.dispatch(tokens, ids, weights)
    want = to_np(moe.combine(recv.tokens * 2, ids, weights))
    outs = OPS.moe_dispatch(tokens, ids, weights, mid)
    np.testing.assert_array_equal(to_np(outs[3]), to_np(recv.expert_counts))
    assert outs[1].numel() == 0  # the BF16 wire has no scales
    combined = OPS.moe_combine(outs[0] * 2, ids, weights, mid)
    np.testing.assert_array_equal(to_np(combined), want)
    np.testing.assert_array_equal(to_np(layer(tokens, ids, weights)), want)
    if not tracing:
        moe.close()
        return
    # the fake implementations give the real outputs' shapes and dtypes (what a compiled graph is planned with)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in (tokens, ids, weights, outs[0])]
        fake_outs = OPS.moe_dispatch(fake[0], fake[1], fake[2], mid)
        fake_combined = OPS.moe_combine(fake[3], fake[1], fake[2], mid)
    for f, real in zip(list(fake_outs) + [fake_combined], list(outs) + [combined]):
        assert (tuple(f.shape), f.dtype, f.device) == (tuple(real.shape), real.dtype, real.device)
    fn, seen = compiled_targets(layer)
    np.testing.assert_array_equal(to_np(fn(tokens, ids, weights)), want)
    assert {"switchyard.moe_dispatch", "switchyard.moe_combine"} <= set(seen), seen
    moe.close()


def test_alltoall_op_host() -> None:
    on_this_thread(check_alltoall_op, True)
    on_this_thread(check_alltoall_op, True)  # again, another communicator: torch.compile recompiles
    on_host(2, check_alltoall_op, False)


def test_moe_ops_host() -> None:
    on_this_thread(check_moe_ops, True)
    on_this_thread(check_moe_ops, True)  # again, another object: the recompile must keep the key a constant
    on_host(2, check_moe_ops, False)


def check_unregistered(comm: sy.Comm) -> None:
    with pytest.raises(sy.InvalidArgError, match=r"key: 'Comm@1' is not a registered Comm"):
        OPS.alltoall(torch.zeros(2), "Comm@1")
    with pytest.raises(sy.InvalidArgError, match=r"is not a registered MoE"):
        OPS.moe_combine(torch.zeros(2), torch.zeros(2), None, ops.register(comm))


def test_unregistered_host() -> None:
    on_host(1, check_unregistered)


@gpu
def test_ops_gpu(gpu_comm: sy.Comm) -> None:
    check_alltoall_op(gpu_comm, tracing=True)
    check_moe_ops(gpu_comm, tracing=True)
