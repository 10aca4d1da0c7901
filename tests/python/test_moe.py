"""test_moe.py — the MoE low-latency mode (switchyard.MoE) against reference.py, from switchyard.h's words: every
filled slot (payload bit for bit on the BF16 wire, E4M3 bytes and scales on the FP8 wires), src, the counts, and
the combine's sums (exact fp32 fused multiply-adds emulated in numpy, so bit for bit on random values). The
experts' outputs are a function of the token and the expert that any rank can compute, so a rank checks its
combine without seeing its peers' buffers. Host backend at 1-4 ranks; the cuda backend at the launcher's world."""

from __future__ import annotations

import numpy as np
import pytest
import reference as ref
from conftest import flavours, gpu, on_host, to_dev, to_np

import switchyard as sy


class Case:
    """A configuration and every rank's seeded inputs (the same on every rank)."""

    def __init__(self, W: int, E: int, K: int, H: int, T: int, wire: str, per_expert: bool, seed: int, idle=()):
        self.W, self.E, self.K, self.H, self.T, self.L = W, E, K, H, T, E // W
        self.wire, self.per_expert = wire, per_expert
        rng = np.random.default_rng(seed)
        self.n = [int(rng.integers(0, T + 1)) if r % 3 == 1 else T for r in range(W)]  # some ranks send fewer, or none
        self.n = [0 if r in idle else n for r, n in enumerate(self.n)]  # ranks in `idle` send no token
        self.ids, self.tokens, self.weights = [], [], []
        for r in range(W):
            ids = np.array([rng.permutation(E)[:K] for _ in range(self.n[r])], np.int64).reshape(self.n[r], K)
            ids[rng.random(ids.shape) < 0.15] = -1  # some entries name no expert
            self.ids.append(ids)
            self.tokens.append(ref.bf16_bits(rng.standard_normal((self.n[r], H)).astype(np.float32) * 3))
            self.weights.append(rng.standard_normal((self.n[r], K)).astype(np.float32))

    def expert_fn(self, x_bits: np.ndarray, g: int) -> np.ndarray:
        """An expert's output for tokens of bf16 bits: bf16(x * (1 + g/8) - g/16), computed alike everywhere."""
        return ref.bf16_bits(ref.bf16_value(x_bits) * np.float32(1 + g / 8) - np.float32(g / 16))


def check_moe(comm: sy.Comm, c: Case, flavour: str, halves: bool, id_kind: str) -> None:
    r, L = comm.rank, c.L
    moe = sy.MoE(comm, max_tokens=c.T, hidden=c.H, top_k=c.K, num_experts=c.E, wire=c.wire, per_expert=c.per_expert)
    assert (moe.local_experts, moe.slots) == (L, c.W * c.T)
    ids_np = c.ids[r].astype(np.int32 if id_kind == "i32" else np.int64)
    tokens = to_dev(comm, c.tokens[r], flavour, "bf16")
    ids = to_dev(comm, ids_np, flavour)
    weights = to_dev(comm, c.weights[r], flavour)
    for step in range(2):  # twice: the second call reuses the buffers (and the other parity of the workspace)
        recv = moe.alloc_recv(tokens)
        if halves:
            moe.dispatch_send(tokens, ids, weights)
            moe.dispatch_recv(recv)
        else:
            moe.dispatch(tokens, ids, weights, recv=recv)
        slots = ref.ll_slots(c.ids, r, L)
        counts, src = to_np(recv.expert_counts), to_np(recv.src)
        np.testing.assert_array_equal(counts, [len(s) for s in slots])
        got_tokens = to_np(recv.tokens)
        scales = to_np(recv.scales) if recv.scales is not None else None
        expert_out = np.zeros((L, c.W * c.T, c.H), np.uint16)
        for e in range(L):
            for slot, (s, t, k) in enumerate(slots[e]):
                assert tuple(src[e, slot]) == (s, t), (e, slot)
                if c.wire == "bf16":
                    np.testing.assert_array_equal(got_tokens[e, slot], c.tokens[s][t])
                else:
                    q, sc = ref.quantise(c.tokens[s][t : t + 1], c.wire == "fp8_ue8m0")
                    np.testing.assert_array_equal(got_tokens[e, slot], q[0])
                    np.testing.assert_array_equal(scales[e, :, slot], sc[0])
                expert_out[e, slot] = c.expert_fn(c.tokens[s][t], r * L + e)
            rank_counts = [sum(1 for s, _, _ in slots[e] if s == src_rank) for src_rank in range(c.W)]
            np.testing.assert_array_equal(to_np(recv.rank_counts)[e], rank_counts)
        y = to_dev(comm, expert_out, flavour, "bf16")
        if halves:
            moe.combine_send(y)
            out = moe.combine_recv(ids, weights)
        else:
            out = moe.combine(y, ids, weights)
        # every rank's expert_out, as each would compute it, and where rank r's entries landed there
        all_out, slot_of = [], []
        for p in range(c.W):
            sl = ref.ll_slots(c.ids, p, L)
            eo = np.zeros((L, c.W * c.T, c.H), np.uint16)
            where = {}
            for e in range(L):
                for slot, (s, t, k) in enumerate(sl[e]):
                    eo[e, slot] = c.expert_fn(c.tokens[s][t], p * L + e)
                    if s == r:
                        where[(t, k)] = slot
            all_out.append(eo)
            slot_of.append(where)
        want = ref.ll_combine(c.ids[r], c.weights[r], all_out, slot_of, L, c.per_expert, c.H)
        np.testing.assert_array_equal(to_np(out), want)
    moe.close()


CASES = {  # W, E, K, H, T, wire, per_expert, seed
    "one rank bf16": (1, 4, 2, 128, 6, "bf16", False, 1),
    "two ranks bf16 per expert": (2, 8, 3, 256, 5, "bf16", True, 2),
    "three ranks fp8": (3, 6, 2, 128, 4, "fp8", False, 3),
    "four ranks ue8m0 per expert": (4, 16, 4, 128, 3, "fp8_ue8m0", True, 4),
    "two ranks top-k = experts": (2, 4, 4, 128, 4, "bf16", False, 5),
}


@pytest.mark.parametrize("halves", [False, True], ids=["one call", "halves"])
@pytest.mark.parametrize("name", list(CASES))
def test_moe_host(name: str, halves: bool) -> None:
    W, E, K, H, T, wire, per_expert, seed = CASES[name]
    flavour = flavours()[seed % len(flavours())]
    on_host(W, check_moe, Case(W, E, K, H, T, wire, per_expert, seed), flavour, halves, "i32" if seed % 2 else "i64")


def test_moe_idle_rank_host() -> None:
    """A rank with no tokens (empty tensors) still takes part in every call."""
    on_host(3, check_moe, Case(3, 6, 2, 128, 4, "fp8", False, 9, idle=(1,)), flavours()[-1], False, "i32")


def check_bad_arguments(comm: sy.Comm) -> None:
    moe = sy.MoE(comm, max_tokens=4, hidden=128, top_k=2, num_experts=4, wire="bf16")
    tok = np.zeros((2, 128), np.uint16)
    ids = np.zeros((2, 2), np.int32)
    ids[:, 1] = 1
    w = np.ones((2, 2), np.float32)
    with pytest.raises(sy.InvalidArgError, match=r"weights: required in the default \(rank-reduced\) mode"):
        moe.dispatch(tok, ids)
    with pytest.raises(sy.InvalidArgError, match=r"tokens: dtype float32, want uint16"):
        moe.dispatch(tok.astype(np.float32), ids, w)
    with pytest.raises(sy.InvalidArgError, match=r"expert_ids: shape \[2, 3\], want \[2, 2\]"):
        moe.dispatch(tok, np.zeros((2, 3), np.int32), w)
    with pytest.raises(sy.InvalidArgError, match=r"expert_ids: 5 tokens > max_tokens=4"):
        moe.dispatch(np.zeros((5, 128), np.uint16), np.zeros((5, 2), np.int32), np.ones((5, 2), np.float32))
    with pytest.raises(sy.InvalidArgError, match=r"tokens: shape \[3, 128\], want \[2, 128\]"):
        moe.dispatch(np.zeros((3, 128), np.uint16), ids, w)
    with pytest.raises(sy.InvalidArgError, match=r"recv: a MoERecv is required"):
        moe.dispatch(tok, ids, w, recv=object())
    with pytest.raises(sy.InvalidArgError, match=r"wire: 'fp4'"):
        sy.MoE(comm, max_tokens=4, hidden=128, top_k=2, num_experts=4, wire="fp4")
    # the library's own check (a repeated id) raises the status of sy_moe_dispatch, on every rank
    twice = np.zeros((2, 2), np.int32)
    with pytest.raises(sy.InvalidArgError) as e:
        moe.dispatch(tok, twice, w)
    assert e.value.call == "sy_moe_dispatch" and e.value.name == "SY_ERR_INVALID_ARG"
    # a configuration the library refuses, naming the status (collective: every rank refuses)
    with pytest.raises(sy.InvalidArgError) as e:
        sy.MoE(comm, max_tokens=4, hidden=100, top_k=2, num_experts=4, wire="fp8")
    assert e.value.call == "sy_moe_create"
    recv = moe.dispatch(tok, ids, w)  # still usable
    assert to_np(recv.expert_counts).sum() == (4 if comm.world_size == 1 else to_np(recv.expert_counts).sum())
    moe.close()


def test_bad_arguments_host() -> None:
    on_host(2, check_bad_arguments)


@gpu
@pytest.mark.parametrize("halves", [False, True], ids=["one call", "halves"])
@pytest.mark.parametrize("wire,per_expert", [("bf16", False), ("fp8", True), ("fp8_ue8m0", False)])
def test_moe_gpu(gpu_comm: sy.Comm, wire: str, per_expert: bool, halves: bool) -> None:
    W = gpu_comm.world_size
    check_moe(gpu_comm, Case(W, 4 * W, 3, 256, 8, wire, per_expert, 40 + W), "torch", halves, "i64")


@gpu
def test_moe_gpu_graph(gpu_comm: sy.Comm) -> None:
    """Dispatch and combine captured in one torch.cuda.graph and replayed: the same bits every replay."""
    import torch

    W, r = gpu_comm.world_size, gpu_comm.rank
    c = Case(W, 2 * W, 2, 128, 4, "bf16", False, 77)
    moe = sy.MoE(gpu_comm, max_tokens=c.T, hidden=c.H, top_k=c.K, num_experts=c.E, wire="bf16")
    tokens, ids = to_dev(gpu_comm, c.tokens[r], "torch", "bf16"), to_dev(gpu_comm, c.ids[r], "torch")
    weights = to_dev(gpu_comm, c.weights[r], "torch")
    recv = moe.alloc_recv(tokens)
    y = torch.zeros((c.L, c.W * c.T, c.H), dtype=torch.bfloat16, device=tokens.device)
    out = torch.empty((c.n[r], c.H), dtype=torch.bfloat16, device=tokens.device)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # eager first, on a stream of ours
        moe.dispatch(tokens, ids, weights, recv=recv)
        y.copy_(recv.tokens)
        moe.combine(y, ids, weights, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    eager = to_np(out).copy()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moe.dispatch(tokens, ids, weights, recv=recv)
        y.copy_(recv.tokens)
        moe.combine(y, ids, weights, out=out)
    for _ in range(3):
        out.fill_(0)
        graph.replay()
        np.testing.assert_array_equal(to_np(out), eager)
    moe.close()
