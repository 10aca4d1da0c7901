"""test_attn_autograd.py — switchyard.autograd's attention directions (q_forward, q_reverse, qkv_forward as
torch.autograd.Functions) checked as adjoints. The rows are small integers in float32 (the KV backward's fp32 sums
of them are exact), so the identities hold with no tolerance, summed over every rank (Comm.allgather_host):
  <q_forward(q), Y> = <q, q_forward'(Y)>          (Q forward's backward is its adjoint: Q reverse)
  <q_reverse(A), G> = <A, q_reverse'(G)>          (Q reverse's backward is its adjoint: Q forward)
  <q_recv, Yq> + <kv_recv, Ykv> = <q, gq> + <kv, gkv>   (the KV forward's backward: the replicas' sum)
and a round trip's gradient in closed form: d/dq <q_reverse(q_forward(q)), G> is G on the rows of sequences that
were sent and 0 elsewhere. Random descriptions (unsent sequences, empty ranks, up to 3 replicas) on the host
backend at 1-4 ranks; the cuda backend at the launcher's world size."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpu, on_host
from test_attn import random_description

import switchyard as sy

torch = pytest.importorskip("torch", reason="the autograd functions need torch")
from switchyard import autograd  # noqa: E402


def total(comm: sy.Comm, value: float) -> float:
    """The sum of every rank's value (exact: integer-valued float64s well below 2^53)."""
    parts = comm.allgather_host(np.float64(value).tobytes())
    return float(sum(np.frombuffer(p, np.float64)[0] for p in parts))


def dot(a, b) -> float:
    return float((a.detach().double() * b.detach().double()).sum())


def ints(rng: np.random.Generator, shape: tuple, device: str) -> torch.Tensor:
    return torch.from_numpy(rng.integers(-4, 5, size=shape).astype(np.float32)).to(device)


def check_adjoints(comm: sy.Comm, d: sy.Description, width: int, seed: int) -> None:
    device = "cpu" if comm.backend != "cuda" else f"cuda:{comm.device}"
    r, C = comm.rank, d.max_replicas
    plan = sy.AttnPlan(comm, d)
    attn = sy.Attn(comm, max_tokens=max(1, plan.max_num_tokens), max_replicas=max(C, 1),
                   max_kv_grad_row_bytes=2 * width * 4)  # fmt: skip
    rng = np.random.default_rng(seed * 100 + r)
    n = plan.num_tokens
    q = ints(rng, (n, width), device).requires_grad_()
    kv = ints(rng, (n, 2, width), device).requires_grad_()

    # Q forward and its backward
    q_recv = autograd.q_forward(attn, plan, q)
    Y = ints(rng, tuple(q_recv.shape), device)
    (gq,) = torch.autograd.grad(q_recv, q, Y)
    assert total(comm, dot(q_recv, Y)) == total(comm, dot(q, gq))

    # Q reverse and its backward
    A = ints(rng, (plan.q_recv_rows, width), device).requires_grad_()
    back = autograd.q_reverse(attn, plan, A)
    G = ints(rng, (n, width), device)
    (gA,) = torch.autograd.grad(back, A, G)
    assert total(comm, dot(back, G)) == total(comm, dot(A, gA))

    # Q + KV forward and its backward
    q_recv, kv_recv = autograd.qkv_forward(attn, plan, q, kv)
    Yq, Ykv = ints(rng, tuple(q_recv.shape), device), ints(rng, tuple(kv_recv.shape), device)
    gq, gkv = torch.autograd.grad((q_recv, kv_recv), (q, kv), (Yq, Ykv))
    assert total(comm, dot(q_recv, Yq) + dot(kv_recv, Ykv)) == total(comm, dot(q, gq) + dot(kv, gkv))
    # only the KV rows' gradient asked for: the Q side still runs (collective) with a zero gradient
    (gkv2,) = torch.autograd.grad(autograd.qkv_forward(attn, plan, q, kv)[1], kv, Ykv)
    assert torch.equal(gkv2, gkv)

    # the round trip: the gradient is G on the rows of sent sequences, 0 elsewhere
    (g,) = torch.autograd.grad(autograd.q_reverse(attn, plan, autograd.q_forward(attn, plan, q)), q, G)
    sent = torch.zeros((n, 1), device=device)
    at = 0
    for length, dst in zip(d.seq_lens[r], d.q_dst[r]):
        sent[at : at + length] = float(dst >= 0)
        at += length
    assert torch.equal(g, G * sent)
    attn.close()
    plan.close()


@pytest.mark.parametrize("world,C", [(1, 1), (2, 2), (3, 2), (4, 3)])
def test_attn_autograd_adjoints_host(world: int, C: int) -> None:
    d = random_description(world, C, 300 + world)
    on_host(world, check_adjoints, d, 8, 40 + world)


def check_bad_arguments(comm: sy.Comm) -> None:
    d = sy.Description([[4, 2]], [[0, 0]], [[[0], [0]]], 1)
    plan = sy.AttnPlan(comm, d)
    attn = sy.Attn(comm, max_tokens=6, max_replicas=1, max_kv_grad_row_bytes=16)
    q = torch.zeros((6, 4))
    with pytest.raises(sy.InvalidArgError, match=r"kv: dtype torch.float64: the KV backward sums bf16, f16 or f32"):
        autograd.qkv_forward(attn, plan, q, torch.zeros((6, 4), dtype=torch.float64))
    with pytest.raises(sy.InvalidArgError, match=r"attn: max_kv_grad_row_bytes=16: the KV backward of 32-byte rows"):
        autograd.qkv_forward(attn, plan, q, torch.zeros((6, 8)))
    q_recv, kv_recv = autograd.qkv_forward(attn, plan, q, torch.ones((6, 4)))  # still in step
    assert torch.equal(kv_recv, torch.ones((6, 4)))
    attn.close()
    plan.close()


def test_attn_autograd_bad_arguments_host() -> None:
    on_host(1, check_bad_arguments)


@gpu
def test_attn_autograd_adjoints_gpu(gpu_comm: sy.Comm) -> None:
    W = gpu_comm.world_size
    check_adjoints(gpu_comm, random_description(W, min(2, W), 400 + W), 64, 50 + W)
