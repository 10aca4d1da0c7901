"""test_moe_ht.py — the MoE high-throughput mode (switchyard.MoEHT) against reference.py, from switchyard.h's
words: the layout (counts, offsets, padding), every row of the dispatch (payload bit for bit, src, weight), the
combine with row values carried back, and the combine's backward (bf16(w g) and the dot product in the header's
order), all bit for bit on random values, with the contiguous layout (exact counts, or the worst-case bound)
and the masked one. Host backend at 1-4 ranks; the cuda backend at the launcher's world size. The autograd
functions: test_moe_ht_autograd.py."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import reference as ref
from conftest import flavours, gpu, on_host, to_dev, to_np

import switchyard as sy


class Case:
    def __init__(self, W, E, K, H, T, wire, align, mode, seed, weighted=True, idle=(), row_major=False, arena=False):
        self.W, self.E, self.K, self.H, self.T, self.L = W, E, K, H, T, E // W
        self.arena = arena  # recv from the object's receive arena (alloc_recv(arena=True))
        self.wire, self.align, self.mode, self.weighted = wire, align, mode, weighted
        self.row_major = row_major  # recv.scales [rows, hidden / 128] (scales_row_major)
        rng = np.random.default_rng(seed)
        self.n = [T if r % 2 == 0 else int(rng.integers(0, T + 1)) for r in range(W)]
        self.n = [0 if r in idle else n for r, n in enumerate(self.n)]  # ranks in `idle` send no token
        self.ids, self.tokens, self.weights, self.grad = [], [], [], []
        for r in range(W):
            ids = np.array([rng.permutation(E)[:K] for _ in range(self.n[r])], np.int64).reshape(self.n[r], K)
            ids[rng.random(ids.shape) < 0.2] = -1
            self.ids.append(ids)
            self.tokens.append(ref.bf16_bits(rng.standard_normal((self.n[r], H)).astype(np.float32)))
            self.weights.append(rng.standard_normal((self.n[r], K)).astype(np.float32))
            self.grad.append(ref.bf16_bits(rng.standard_normal((self.n[r], H)).astype(np.float32)))
        self.stride = T * W if mode == "masked" else 0  # room for every token of every rank

    def y(self, s: int, t: int, g: int) -> np.ndarray:
        """The experts' output for (source s, token t) at global expert g (bf16 bits), computed alike anywhere."""
        return ref.bf16_bits(ref.bf16_value(self.tokens[s][t]) * np.float32(0.5 + g / 4) + np.float32(g / 8))

    def row_value(self, s: int, t: int, k: int) -> np.float32:
        return np.float32(s * 1000 + t * 10 + k + 0.25)

    def weight(self, s: int, t: int, k: int) -> np.float32:
        return self.weights[s][t, k] if self.weighted else np.float32(0)


def check_ht(comm: sy.Comm, c: Case, flavour: str) -> None:
    r, L, H = comm.rank, c.L, c.H
    arena = 0
    if c.arena:  # room for one recv of the most rows alloc_recv can ask for (max_rows, or L x stride)
        arena = sy.MoEHT.recv_arena_need(comm, L * c.stride if c.stride else -1, max_tokens=c.T, hidden=H, top_k=c.K,
                                         num_experts=c.E, wire=c.wire, expert_alignment=c.align)  # fmt: skip
    moe = sy.MoEHT(comm, max_tokens=c.T, hidden=H, top_k=c.K, num_experts=c.E, wire=c.wire, expert_alignment=c.align,
                   scales_row_major=c.row_major, recv_arena_bytes=arena)  # fmt: skip
    assert moe.local_experts == L
    # how the dispatch goes (sy_moe_ht_sizes_t.dispatch_pulled): pushed on the host backend, at world 1 and with
    # SY_HT_PULL=0; else pulled or pushed as the ranks resolved it (auto: by reachability, heap and shape)
    env = os.environ.get("SY_HT_PULL", "").strip()
    if comm.backend != "cuda" or comm.world_size < 2 or env == "0":
        assert moe.dispatch_pulled == 0
    else:
        assert moe.dispatch_pulled in (0, 1, 2)
    fp8, given = c.wire != "bf16", c.wire == "fp8_given"
    ids = to_dev(comm, c.ids[r].astype(np.int32 if r % 2 else np.int64), flavour)
    layout = moe.layout(ids, exact=c.mode == "exact")
    counts, offsets, row_of = ref.ht_rows(c.ids, r, L, c.align, c.stride)
    if c.mode == "exact":
        assert (layout.counts, layout.offsets, layout.rows_needed) == (counts, offsets[:L], offsets[L])
    recv = moe.alloc_recv(layout, expert_stride=c.stride, arena=c.arena)
    assert recv.arena == c.arena
    for name in ("tokens", "src", "weights"):  # poisoned: what the dispatch writes shows
        getattr(recv, name)[...] = 0x5A if name == "tokens" else -9
    if given:
        q, sc = ref.quantise(c.tokens[r], ue8m0=False)
        tokens, scales = to_dev(comm, q, flavour, "e4m3"), to_dev(comm, sc, flavour)
    else:
        tokens, scales = to_dev(comm, c.tokens[r], flavour, "bf16"), None
    weights = to_dev(comm, c.weights[r], flavour) if c.weighted else None
    moe.dispatch(layout, tokens, weights, token_scales=scales, recv=recv)

    np.testing.assert_array_equal(to_np(recv.expert_counts), counts)
    np.testing.assert_array_equal(to_np(recv.expert_offsets), offsets)
    got_tok, got_src, got_w = to_np(recv.tokens), to_np(recv.src), to_np(recv.weights)
    got_sc = to_np(recv.scales) if fp8 else None
    if fp8:
        assert got_sc.shape == ((recv.rows, H // 128) if c.row_major else (H // 128, recv.rows)), got_sc.shape
    owner = {row: key for key, row in row_of.items()}
    for row in range(offsets[L]):
        if row not in owner:  # padding
            assert tuple(got_src[row]) == (-1, -1) and got_w[row] == 0, row
            continue
        s, t, k = owner[row]
        assert tuple(got_src[row]) == (s, t) and got_w[row] == c.weight(s, t, k), row
        if not fp8:
            np.testing.assert_array_equal(got_tok[row], c.tokens[s][t])
            continue
        q, sc = ref.quantise(c.tokens[s][t : t + 1], c.wire == "fp8_ue8m0")
        np.testing.assert_array_equal(got_tok[row], q[0])
        np.testing.assert_array_equal(got_sc[row, :] if c.row_major else got_sc[:, row], sc[0])

    # the combine: each row's expert output, weighted by the rows' weights, row values carried back
    def rank_rows(p):
        return {(t, k): row for (s, t, k), row in ref.ht_rows(c.ids, p, L, c.align, c.stride)[2].items() if s == r}

    def rank_inputs(p):
        _, offs, rows_p = ref.ht_rows(c.ids, p, L, c.align, c.stride)
        y = np.full((max(offs[L], 1), H), 0x7FC0, np.uint16)  # padding rows: NaN, which must not be read
        w = np.zeros(max(offs[L], 1), np.float32)
        v = np.zeros(max(offs[L], 1), np.float32)
        for (s, t, k), row in rows_p.items():
            g = p * L + int(np.searchsorted(offs[:L], row, side="right")) - 1  # the row's expert
            y[row], w[row], v[row] = c.y(s, t, g), c.weight(s, t, k), c.row_value(s, t, k)
        return y, w, v

    inputs = [rank_inputs(p) for p in range(c.W)]
    R = recv.rows
    y_mine = np.zeros((R, H), np.uint16)
    y_mine[: min(R, inputs[r][0].shape[0])] = inputs[r][0][:R]
    v_mine = np.zeros(R, np.float32)
    v_mine[: min(R, inputs[r][2].shape[0])] = inputs[r][2][:R]
    y_dev, v_dev = to_dev(comm, y_mine, flavour, "bf16"), to_dev(comm, v_mine, flavour)
    out, values = moe.combine(layout, y_dev, recv, row_weights=recv.weights, row_values=v_dev)
    want, want_values = ref.ht_combine(c.ids[r], [rank_rows(p) for p in range(c.W)], [i[0] for i in inputs],
                                       [i[1] for i in inputs], [i[2] for i in inputs], L, H)  # fmt: skip
    np.testing.assert_array_equal(to_np(out), want)
    np.testing.assert_array_equal(to_np(values), want_values)
    unweighted = moe.combine(layout, y_dev, recv)
    want_u, _ = ref.ht_combine(c.ids[r], [rank_rows(p) for p in range(c.W)], [i[0] for i in inputs],
                               [None] * c.W, [None] * c.W, L, H)  # fmt: skip
    np.testing.assert_array_equal(to_np(unweighted), want_u)
    moe.set_num_sms(2)  # the calls' SM budget: the same bits on one channel a role
    np.testing.assert_array_equal(to_np(moe.combine(layout, y_dev, recv)), want_u)
    moe.set_num_sms(0)
    # added in place (sy_moe_ht_combine_add): onto finite bf16 rows, -0 among them; tokens with no expert kept
    rng = np.random.default_rng(1000 + r)
    base = ref.bf16_bits(rng.standard_normal((c.n[r], H)).astype(np.float32))
    base[:, ::7] = 0x8000
    acc_dev = to_dev(comm, base.copy(), flavour, "bf16")  # numpy: the same array, written in place
    got_add = moe.combine(layout, y_dev, recv, row_weights=recv.weights, out=acc_dev, add=True)
    assert got_add is acc_dev
    want_add, _ = ref.ht_combine(c.ids[r], [rank_rows(p) for p in range(c.W)], [i[0] for i in inputs],
                                 [i[1] for i in inputs], [None] * c.W, L, H, add_to=base)  # fmt: skip
    np.testing.assert_array_equal(to_np(acc_dev), want_add)

    # the combine's backward: grad_rows = bf16(w g), the weights' gradient = <g, y> in the header's order
    g = to_dev(comm, c.grad[r], flavour, "bf16")
    grad_rows, grad_w = moe.combine_backward(layout, g, recv, row_weights=recv.weights, rows_in=y_dev, weights_grad=True)
    got_gr, got_gw = to_np(grad_rows), to_np(grad_w)
    for row in range(offsets[L]):
        if row not in owner:
            assert got_gw[row] == 0 and not got_gr[row].any(), row
            continue
        s, t, k = owner[row]
        gt = ref.bf16_value(c.grad[s][t])
        np.testing.assert_array_equal(got_gr[row], ref.bf16_bits((gt * c.weight(s, t, k)).astype(np.float32)))
        dot = ref.ht_dot(gt, ref.bf16_value(y_mine[row]))
        assert got_gw[row].view(np.uint32) == dot.view(np.uint32), (row, got_gw[row], dot)
    if c.arena:
        side, first = None, None  # cuda: a stream of torch's, busy, the free and the allocation in its order
        if comm.backend == "cuda":
            import torch

            side, first = torch.cuda.Stream(), recv.tokens.data_ptr()
            with torch.cuda.stream(side):
                torch.cuda._sleep(50_000_000)  # the stream has not reached the free when the allocation comes
        moe.free_recv(recv, stream=side)
        again = moe.alloc_recv(layout, expert_stride=c.stride, arena=True, stream=side)  # that stream takes it at once
        if first is not None:
            assert again.tokens.data_ptr() == first
        moe.free_recv(again, stream=side)
        with pytest.raises(sy.InvalidArgError, match=r"stream: 'now', want a torch.cuda.Stream"):
            moe.free_recv(again, stream="now")
        with pytest.raises(sy.InvalidArgError, match=r"recv: an HTRecv of alloc_recv\(arena=True\) is required"):
            moe.free_recv(moe.alloc_recv(layout, rows=1))
    moe.close()


CASES = {  # W, E, K, H, T, wire, align, mode, seed
    "one rank exact": (1, 4, 2, 256, 6, "bf16", 1, "exact", 1),
    "two ranks worst case align 16": (2, 8, 3, 512, 5, "bf16", 16, "worst", 2),
    "three ranks fp8 masked": (3, 6, 2, 128, 4, "fp8", 1, "masked", 3),
    "four ranks ue8m0 exact align 8": (4, 8, 4, 128, 3, "fp8_ue8m0", 8, "exact", 4),
    "two ranks fp8 given": (2, 4, 2, 256, 4, "fp8_given", 4, "worst", 5),
}


@pytest.mark.parametrize("name", list(CASES))
def test_moe_ht_host(name: str) -> None:
    W, E, K, H, T, wire, align, mode, seed = CASES[name]
    flavour = flavours()[seed % len(flavours())]
    on_host(W, check_ht, Case(W, E, K, H, T, wire, align, mode, seed, weighted=seed != 2), flavour)


@pytest.mark.parametrize("W,wire,mode", [(2, "fp8", "worst"), (3, "fp8_given", "exact"), (1, "fp8_ue8m0", "masked")])
def test_moe_ht_row_major_scales_host(W: int, wire: str, mode: str) -> None:
    """scales_row_major: recv.scales [rows, hidden / 128], the same values."""
    on_host(W, check_ht, Case(W, 4 * W, 3, 256, 5, wire, 4, mode, 30 + W, row_major=True), flavours()[W % len(flavours())])


@pytest.mark.parametrize("mode", ["exact", "worst"])
def test_moe_ht_idle_rank_host(mode: str) -> None:
    """A rank with no tokens (empty tensors) still takes part in every call."""
    on_host(3, check_ht, Case(3, 6, 2, 128, 4, "bf16", 4, mode, 19, idle=(1,)), flavours()[-1])


@pytest.mark.parametrize("W,wire,mode", [(2, "bf16", "worst"), (3, "fp8", "masked"), (2, "fp8_ue8m0", "exact")])
def test_moe_ht_arena_host(W: int, wire: str, mode: str) -> None:
    """recv from the object's receive arena: the same rows and results (the first copy in place on GPUs)."""
    on_host(W, check_ht, Case(W, 4 * W, 3, 256, 5, wire, 4, mode, 40 + W, arena=True), flavours()[W % len(flavours())])


def check_arena_need(comm: sy.Comm) -> None:
    """MoEHT.recv_arena_need: the six sections of a recv, each rounded up to 256 bytes; bad values refused."""
    for wire, hidden, E, rows in (("bf16", 256, 8, 7), ("fp8", 512, 4, 33), ("fp8_ue8m0", 128, 16, 0)):
        L, fp8 = E // comm.world_size, wire != "bf16"
        secs = ((L + 1) * 4, L * 4, rows * 8, rows * 4, rows * (hidden // 128) * 4 if fp8 else 0,
                rows * hidden * (1 if fp8 else 2))  # fmt: skip
        want = sum((b + 255) // 256 * 256 for b in secs)
        got = sy.MoEHT.recv_arena_need(comm, rows, max_tokens=4, hidden=hidden, top_k=2, num_experts=E, wire=wire)
        assert got == want, (wire, rows, got, want)
    with pytest.raises(sy.InvalidArgError, match=r"rows=-2: want >= 0, or -1"):
        sy.MoEHT.recv_arena_need(comm, -2, max_tokens=4, hidden=128, top_k=2, num_experts=4)
    with pytest.raises(sy.InvalidArgError, match=r"wire: 'fp4'"):
        sy.MoEHT.recv_arena_need(comm, 1, max_tokens=4, hidden=128, top_k=2, num_experts=4, wire="fp4")
    for bad in (-1, 2**64):
        with pytest.raises(sy.InvalidArgError, match=r"recv_arena_bytes: .* want an int in \[0, 2\*\*64\)"):
            sy.MoEHT(comm, max_tokens=4, hidden=128, top_k=2, num_experts=4, recv_arena_bytes=bad)


def test_arena_need_host() -> None:
    on_host(2, check_arena_need)


def check_bad_arguments(comm: sy.Comm) -> None:
    with pytest.raises(sy.InvalidArgError, match=r"scales_row_major: True with the 'bf16' wire"):
        sy.MoEHT(comm, max_tokens=4, hidden=128, top_k=2, num_experts=4, scales_row_major=True)
    moe = sy.MoEHT(comm, max_tokens=4, hidden=128, top_k=2, num_experts=4)
    ids = np.array([[0, 1], [2, -1]], np.int32)
    with pytest.raises(sy.InvalidArgError, match=r"expert_ids: dtype float32"):
        moe.layout(ids.astype(np.float32))
    layout = moe.layout(ids)
    tok = np.zeros((2, 128), np.uint16)
    with pytest.raises(sy.InvalidArgError, match=r"layout: a Layout \(MoEHT.layout\) is required"):
        moe.dispatch(None, tok)
    with pytest.raises(sy.InvalidArgError, match=r"tokens: shape \[3, 128\], want \[2, 128\]"):
        moe.dispatch(layout, np.zeros((3, 128), np.uint16))
    with pytest.raises(sy.InvalidArgError, match=r"token_scales: only with wire 'fp8_given'"):
        moe.dispatch(layout, tok, token_scales=np.zeros((2, 1), np.float32))
    with pytest.raises(sy.InvalidArgError, match=r"weights: shape \[2, 3\], want \[2, 2\]"):
        moe.dispatch(layout, tok, np.zeros((2, 3), np.float32))
    recv = moe.dispatch(layout, tok)
    with pytest.raises(sy.InvalidArgError, match=r"expert_stride: 4, but recv was made with expert_stride 0"):
        moe.dispatch(layout, tok, recv=recv, expert_stride=4)  # refused before the call: both ranks in step
    with pytest.raises(sy.InvalidArgError, match=r"rows_in: shape"):
        moe.combine(layout, np.zeros((recv.rows + 1, 128), np.uint16), recv)
    with pytest.raises(sy.InvalidArgError, match=r"row_weights: dtype float64"):
        moe.combine(layout, np.zeros((recv.rows, 128), np.uint16), recv, row_weights=np.zeros(recv.rows))
    with pytest.raises(sy.InvalidArgError, match=r"rows_in: required"):
        moe.combine_backward(layout, tok, recv, weights_grad=True)
    # the library's own check: a recv too small for the layout is refused on every rank, nothing written
    small = moe.alloc_recv(layout, rows=0)
    with pytest.raises(sy.InvalidArgError) as e:
        moe.dispatch(layout, tok, recv=small)
    assert e.value.call == "sy_moe_ht_dispatch"
    moe.combine(layout, np.zeros((recv.rows, 128), np.uint16), recv)  # still in step
    with pytest.raises(sy.InvalidArgError, match=r"out: add=True adds into out"):
        moe.combine(layout, np.zeros((recv.rows, 128), np.uint16), recv, add=True)
    with pytest.raises(sy.InvalidArgError) as e:  # the calls' SM budget: 2 .. the object's (16), 0 for it
        moe.set_num_sms(17)
    assert e.value.call == "sy_moe_ht_set_num_sms"
    with pytest.raises(sy.InvalidArgError, match=r"num_sms: 4.0, want an int"):
        moe.set_num_sms(4.0)
    moe.set_num_sms(2)
    moe.combine(layout, np.zeros((recv.rows, 128), np.uint16), recv)
    moe.set_num_sms(0)
    moe.close()
    with pytest.raises(sy.InvalidArgError, match=r"MoEHT: .*the object is closed"):
        moe.set_num_sms(2)
    # the add's pipe table holds top_k + 1 rows: top_k 32 is refused by the library, naming the call
    wide = sy.MoEHT(comm, max_tokens=1, hidden=128, top_k=32, num_experts=32)
    wl = wide.layout(np.arange(32, dtype=np.int32).reshape(1, 32))
    wr = wide.dispatch(wl, np.zeros((1, 128), np.uint16))
    with pytest.raises(sy.InvalidArgError) as e:
        wide.combine(wl, np.zeros((wr.rows, 128), np.uint16), wr, out=np.zeros((1, 128), np.uint16), add=True)
    assert e.value.call == "sy_moe_ht_combine_add"
    wide.combine(wl, np.zeros((wr.rows, 128), np.uint16), wr)  # still in step
    wide.close()


def test_bad_arguments_host() -> None:
    on_host(2, check_bad_arguments)


def check_one_refuses(comm: sy.Comm) -> float:
    """Rank 0's arguments are refused in Python (wire), rank 1's are good: both raise at once (rank 0 still meets
    rank 1 in the create's exchange, with a config the library refuses), and the communicator stays usable."""
    t0 = time.monotonic()
    good = dict(max_tokens=4, hidden=128, top_k=2, num_experts=4)
    for cls, bad in ((sy.MoEHT, {"wire": "fp4"}), (sy.MoE, {"wire": "fp4"}), (sy.MoEHT, {"top_k": 0})):
        with pytest.raises(sy.InvalidArgError):
            cls(comm, **{**good, **(bad if comm.rank == 0 else {})})
    took = time.monotonic() - t0
    sy.MoEHT(comm, **good).close()
    sy.MoE(comm, **good).close()
    return took


def test_one_rank_refuses_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SY_BOOT_TIMEOUT_MS", "10000")  # a regression waits this long in an exchange, not 60 s
    took = on_host(2, check_one_refuses)
    assert max(took) < 5.0, took


@gpu
@pytest.mark.parametrize("wire,align,mode", [("bf16", 1, "exact"), ("fp8", 16, "worst"), ("bf16", 1, "masked")])
def test_moe_ht_gpu(gpu_comm: sy.Comm, wire: str, align: int, mode: str) -> None:
    W = gpu_comm.world_size
    check_ht(gpu_comm, Case(W, 4 * W, 3, 512, 8, wire, align, mode, 60 + W), "torch")


@gpu
@pytest.mark.parametrize("wire,mode", [("bf16", "worst"), ("fp8", "exact")])
def test_moe_ht_arena_gpu(gpu_comm: sy.Comm, wire: str, mode: str) -> None:
    W = gpu_comm.world_size
    check_ht(gpu_comm, Case(W, 4 * W, 3, 512, 8, wire, 16, mode, 80 + W, arena=True), "torch")


@gpu
def test_moe_ht_row_major_scales_gpu(gpu_comm: sy.Comm) -> None:
    W = gpu_comm.world_size
    check_ht(gpu_comm, Case(W, 4 * W, 3, 512, 8, "fp8", 16, "worst", 70 + W, row_major=True), "torch")
