"""test_moe_ht_autograd.py — switchyard.autograd's dispatch and combine (torch.autograd.Functions over the
high-throughput calls) checked as adjoints in float64. The values are exact (small integers, weights of +-0.5,
1, 2), so every bf16 rounding and fp32 sum on the way is exact and the identities hold with no tolerance:
  <dispatch(x), Y> = <x, dispatch'(Y)>          (the dispatch's backward is its adjoint)
  <combine(y; w), G> = <y, combine'(G)>         (the combine's backward is its adjoint in y)
  <combine(y; w + d), G> - <combine(y; w), G> = <d, dL/dw>   (linear in w: the weights' gradient)
and a layer's gradient, x -> dispatch -> 2 rows -> combine weighted by the routing weights, equals its closed
form: dL/dx[t] = 2 (sum of t's weights) G[t], dL/dw[t][k] = <2 x[t], G[t]> (0 where k names no expert). Sums
over ranks go through Comm.allgather_host. A step's receive buffers are freed with it (no reference cycle through
the graph). Host backend at 1-3 ranks; the cuda backend at the launcher's world."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from conftest import gpu, on_host

import switchyard as sy

torch = pytest.importorskip("torch", reason="the autograd functions need torch")
from switchyard import autograd  # noqa: E402


def inputs(W: int, E: int, K: int, H: int, T: int, seed: int, rank: int):
    """Rank `rank`'s exact-valued inputs (every rank can make any rank's)."""
    rng = np.random.default_rng(seed * 100 + rank)
    n = T if rank % 2 == 0 else T - 1
    ids = np.array([rng.permutation(E)[:K] for _ in range(n)], np.int64).reshape(n, K)
    ids[rng.random(ids.shape) < 0.2] = -1
    x = rng.integers(-4, 5, size=(n, H)).astype(np.float32)
    w = rng.choice(np.array([-2, -1, -0.5, 0.5, 1, 2], np.float32), size=(n, K))
    G = rng.integers(-4, 5, size=(n, H)).astype(np.float32)
    return ids, x, w, G


def total(comm: sy.Comm, value: float) -> float:
    """The sum of every rank's value (exact: each is an integer-valued float64 well below 2^53)."""
    parts = comm.allgather_host(np.float64(value).tobytes())
    return float(sum(np.frombuffer(p, np.float64)[0] for p in parts))


def dot(a, b) -> float:
    return float((a.detach().double() * b.detach().double()).sum())


def check_adjoints(comm: sy.Comm, E: int, K: int, H: int, T: int, seed: int) -> None:
    device = "cpu" if comm.backend != "cuda" else f"cuda:{comm.device}"
    ids_np, x_np, w_np, G_np = inputs(comm.world_size, E, K, H, T, seed, comm.rank)
    ids = torch.from_numpy(ids_np).to(device)
    moe = sy.MoEHT(comm, max_tokens=T, hidden=H, top_k=K, num_experts=E, expert_alignment=4)
    layout = moe.layout(ids)
    x = torch.from_numpy(x_np).to(device, torch.bfloat16).requires_grad_()
    w = torch.from_numpy(w_np).to(device).requires_grad_()

    # the dispatch: <dispatch(x), Y> = <x, dispatch'(Y)>, Y zero on padding rows
    recv = autograd.dispatch(moe, layout, x, w)
    real = (recv.src[:, 0] >= 0).unsqueeze(1)
    rng = np.random.default_rng(seed)
    Y = torch.from_numpy(rng.integers(-3, 4, size=tuple(recv.tokens.shape)).astype(np.float32)).to(device)
    Y = (Y * real).to(torch.bfloat16)
    gx, gw = torch.autograd.grad((recv.tokens, recv.weights), (x, w), (Y, torch.ones_like(recv.weights)))
    assert total(comm, dot(torch.where(real, recv.tokens, 0), Y)) == total(comm, dot(x, gx))
    assert total(comm, float(recv.weights.detach().double().sum())) == total(comm, dot(w * (ids >= 0), gw))

    # the combine: adjoint in the rows, and linear in the row weights
    y = torch.where(real, 2 * recv.tokens.detach(), 0).requires_grad_()  # padding rows: never read
    rw = recv.weights.detach().clone().requires_grad_()
    G = torch.from_numpy(G_np).to(device, torch.bfloat16)
    out = autograd.combine(moe, layout, y, recv, rw)
    gy, grw = torch.autograd.grad(out, (y, rw), G)
    assert total(comm, dot(out, G)) == total(comm, dot(y, gy))
    d = torch.from_numpy(rng.choice(np.array([-1, 0.5, 1], np.float32), size=tuple(rw.shape))).to(device) * real[:, 0]
    out2 = moe.combine(layout, y.detach(), recv, row_weights=(rw + d).detach())
    assert total(comm, dot(out2, G) - dot(out, G)) == total(comm, dot(d, grw))

    # a layer: x -> dispatch -> 2 x rows -> combine by the routing weights; the gradient's closed form
    layout2 = moe.layout(ids)
    recv2 = autograd.dispatch(moe, layout2, x, w)
    out = autograd.combine(moe, layout2, 2 * recv2.tokens, recv2, recv2.weights)
    gx, gw = torch.autograd.grad(out, (x, w), G)
    valid = torch.from_numpy((ids_np >= 0).astype(np.float32)).to(device)
    want_gx = 2 * (w.detach() * valid).sum(1, keepdim=True) * G.float()
    want_gw = 2 * (x.detach().float() @ G.float().T).diagonal().unsqueeze(1) * valid
    assert torch.equal(gx.float(), want_gx)
    assert torch.equal(gw, want_gw)
    moe.close()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_autograd_adjoints_host(world: int) -> None:
    on_host(world, check_adjoints, 4 * world, 3, 256, 6, 10 + world)


def check_bf16_only(comm: sy.Comm) -> None:
    moe = sy.MoEHT(comm, max_tokens=2, hidden=128, top_k=1, num_experts=2, wire="fp8")
    layout = moe.layout(torch.zeros((2, 1), dtype=torch.int32))
    with pytest.raises(sy.InvalidArgError, match=r"moe: wire 'fp8': the differentiable dispatch needs the 'bf16'"):
        autograd.dispatch(moe, layout, torch.zeros((2, 128), dtype=torch.bfloat16))
    moe.close()


def test_autograd_bf16_only_host() -> None:
    on_host(1, check_bf16_only)


def check_buffers_freed(comm: sy.Comm) -> None:
    """A step's receive buffers die with the step: nothing of the graph keeps the dispatch's outputs (an output on
    the Function's ctx is a cycle through C++, output -> grad_fn -> ctx -> output, that gc never collects)."""
    E, K, H, T = 2 * comm.world_size, 2, 128, 8
    moe = sy.MoEHT(comm, max_tokens=T, hidden=H, top_k=K, num_experts=E)
    ids_np, x_np, w_np, _ = inputs(comm.world_size, E, K, H, T, 7, comm.rank)
    alive = []
    for step in range(2):
        layout = moe.layout(torch.from_numpy(ids_np))
        x = torch.from_numpy(x_np).to(torch.bfloat16).requires_grad_()
        w = torch.from_numpy(w_np).requires_grad_()
        recv = autograd.dispatch(moe, layout, x, w)
        out = autograd.combine(moe, layout, 2 * recv.tokens, recv, recv.weights)
        out.float().sum().backward()
        assert x.grad is not None and w.grad is not None
        alive += [weakref.ref(a) for a in (recv.tokens, recv.weights, recv.src, recv.expert_offsets)]
        del recv, out, layout, x, w
        gc.collect()
        assert [r() is None for r in alive] == [True] * len(alive), f"step {step}: receive buffers still alive"
    moe.close()


def test_autograd_frees_receive_buffers_host() -> None:
    on_host(2, check_buffers_freed)


@gpu
def test_autograd_adjoints_gpu(gpu_comm: sy.Comm) -> None:
    W = gpu_comm.world_size
    check_adjoints(gpu_comm, 4 * W, 3, 512, 16, 20 + W)
