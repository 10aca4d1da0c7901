"""test_attn.py — the attention dispatch (switchyard.place, AttnPlan, Attn) against the header's words: at a
destination, rows arrive by source rank, then sequence, then replica; Q reverse brings the attention rows back to
their owners' rows (the rest zero); the KV backward sums each token's replicas in fp32 in replica order, rounded
once (or keeps them apart, unsummed). Every rank's rows encode (rank, row, column), so a misplaced row shows.
Random descriptions with unsent sequences and empty ranks, and the placement planner's. Host backend at 1-4
ranks; the cuda backend at the launcher's world size."""

from __future__ import annotations

import numpy as np
import pytest
import reference as ref
from conftest import flavours, gpu, on_host, to_dev, to_np

import switchyard as sy


def random_description(W: int, C: int, seed: int) -> sy.Description:
    rng = np.random.default_rng(seed)
    seq_lens, q_dst, kv_dst = [], [], []
    for r in range(W):
        n = int(rng.integers(0, 4)) if r % 2 else int(rng.integers(1, 4))
        seq_lens.append([int(x) for x in rng.integers(0, 12, size=n)])
        q_dst.append([int(x) for x in rng.integers(-1, W, size=n)])
        lists = []
        for _ in range(n):
            ranks = [int(x) for x in rng.permutation(W)[: int(rng.integers(0, min(C, W) + 1))]]
            slots = ranks + [-1] * (C - len(ranks))
            lists.append([int(x) for x in rng.permutation(slots)])  # -1 anywhere: replica c is slot c
        kv_dst.append(lists)
    return sy.Description(seq_lens, q_dst, kv_dst if C else None, C)


def rows_of(rank: int, n: int, width: int, salt: int) -> np.ndarray:
    """Rank `rank`'s rows: f32 [n, width], each value (rank, row, column, salt) in one exact number."""
    r = np.arange(n, dtype=np.float32)[:, None]
    c = np.arange(width, dtype=np.float32)[None, :]
    return (rank * 4096 + r * 16 + c + salt * 0.25).astype(np.float32)


def arrivals(d: sy.Description, dst: int, kv: bool) -> list[tuple[int, int, int, int]]:
    """(source, sequence, replica, first source row) of what reaches dst, in arrival order."""
    out = []
    for s, lens in enumerate(d.seq_lens):
        start = np.concatenate([[0], np.cumsum(lens)]).astype(int)
        for i in range(len(lens)):
            if kv:
                out += [(s, i, c, start[i]) for c in range(d.max_replicas) if d.kv_dst[s][i][c] == dst]
            elif d.q_dst[s][i] == dst:
                out.append((s, i, 0, start[i]))
    return out


def gather(d: sy.Description, dst: int, kv: bool, width: int, salt: int) -> np.ndarray:
    parts = [rows_of(s, sum(d.seq_lens[s]), width, salt)[row : row + d.seq_lens[s][i]]
             for s, i, _, row in arrivals(d, dst, kv)]  # fmt: skip
    return np.concatenate(parts) if parts else np.zeros((0, width), np.float32)


def check_attn(comm: sy.Comm, d: sy.Description, flavour: str, grad_kind: str) -> None:
    r, W, C, width = comm.rank, comm.world_size, d.max_replicas, 8
    plan = sy.AttnPlan(comm, d)
    n = sum(d.seq_lens[r])
    assert plan.num_tokens == n and plan.max_num_tokens == max(sum(x) for x in d.seq_lens)
    want_q, want_kv = gather(d, r, False, width, 1), gather(d, r, True, width, 2)
    assert plan.q_recv_rows == len(want_q) and plan.kv_recv_rows == len(want_kv)
    assert plan.q_recv_from == [sum(d.seq_lens[s][i] for s2, i, _, _ in arrivals(d, r, False) if s2 == s)
                                for s in range(W)]  # fmt: skip
    # the metadata: sy_attn_plan_seqs' arrival lists are the header's order
    assert [(x.src_rank, x.seq, x.replica) for x in plan.kv_recv] == [a[:3] for a in arrivals(d, r, True)]
    attn = sy.Attn(comm, max_tokens=max(1, plan.max_num_tokens), max_replicas=max(C, 1), max_kv_grad_row_bytes=width * 4)
    q, kv = to_dev(comm, rows_of(r, n, width, 1), flavour), to_dev(comm, rows_of(r, n, width, 2), flavour)

    np.testing.assert_array_equal(to_np(attn.q_forward(plan, q)), want_q)
    q_recv, kv_recv = attn.qkv_forward(plan, q, kv)
    np.testing.assert_array_equal(to_np(q_recv), want_q)
    np.testing.assert_array_equal(to_np(kv_recv), want_kv)

    # Q reverse: the attention rows (here q_recv * 2) back to their owners; unsent sequences' rows zero
    back = to_np(attn.q_reverse(plan, q_recv * 2))
    start = np.concatenate([[0], np.cumsum(d.seq_lens[r])]).astype(int)
    want_back = np.zeros((n, width), np.float32)
    for i, dst in enumerate(d.q_dst[r]):
        if dst >= 0:
            want_back[start[i] : start[i + 1]] = 2 * rows_of(r, n, width, 1)[start[i] : start[i + 1]]
    np.testing.assert_array_equal(back, want_back)

    # KV backward: each replica's gradient is a function of (destination, row) any rank can compute
    def grads(dst: int) -> np.ndarray:
        g = rows_of(dst, len(gather(d, dst, True, width, 2)), width, 3) / 7  # not exact: the sum rounds
        return g if grad_kind == "f32" else ref.bf16_value(ref.bf16_bits(g))

    g_mine = grads(r)
    g_dev = to_dev(comm, g_mine if grad_kind == "f32" else ref.bf16_bits(g_mine), flavour, grad_kind)
    summed, unsummed = to_np(attn.kv_backward(plan, g_dev)), to_np(attn.kv_backward(plan, g_dev, unsummed=True))
    want_sum = np.zeros((n, width), np.float32)
    want_each = np.zeros((max(C, 1) * n, width), np.float32)
    for i in range(len(d.seq_lens[r])):
        acc = np.zeros((d.seq_lens[r][i], width), np.float32)
        for c in range(C):
            dst = d.kv_dst[r][i][c]
            if dst < 0:
                continue
            at = np.concatenate([[0], np.cumsum([d.seq_lens[s][j] for s, j, _, _ in arrivals(d, dst, True)])])
            k = [a[:3] for a in arrivals(d, dst, True)].index((r, i, c))
            g = grads(dst)[at[k] : at[k + 1]]
            acc = (acc + g).astype(np.float32)  # fp32, replica order, from +0
            want_each[c * n + start[i] : c * n + start[i + 1]] = g
        want_sum[start[i] : start[i + 1]] = acc
    if grad_kind == "bf16":
        want_sum, want_each = ref.bf16_bits(want_sum), ref.bf16_bits(want_each)
    np.testing.assert_array_equal(summed, want_sum)
    np.testing.assert_array_equal(unsummed, want_each[: C * n])
    attn.close()
    plan.close()


@pytest.mark.parametrize("world,C", [(1, 1), (2, 2), (3, 2), (4, 3)])
def test_attn_random_host(world: int, C: int) -> None:
    d = random_description(world, C, 100 + world)
    on_host(world, check_attn, d, flavours()[world % len(flavours())], "f32" if world % 2 else "bf16")


def test_attn_placement_host() -> None:
    placement = sy.place([[100, 30], [10], [50, 50, 5]])
    assert placement.stats["balanced"] == 1 and placement.stats["max_over_mean"] <= 1.1
    d = placement.description
    assert [sum(x) for x in d.seq_lens] == [130, 10, 105]  # shards tile each rank's documents
    on_host(3, check_attn, d, flavours()[-1], "bf16")


def check_windows(comm: sy.Comm, doc_lens: list[list[int]], flavour: str) -> None:
    """AttnPlan.windows against the rows themselves: after Q+KV forward, shard i's q_recv rows are its source rows,
    and its kv_recv window is its document's rows from the first to the shard's last (so the shard's queries are
    the window's last q_len rows: bottom-right causal)."""
    r, width = comm.rank, 4
    placement = sy.place(doc_lens)
    plan = sy.AttnPlan(comm, placement.description)
    attn = sy.Attn(comm, max_tokens=max(1, plan.max_num_tokens), max_replicas=max(1, placement.description.max_replicas))
    n = plan.num_tokens
    q_recv, kv_recv = (to_np(x) for x in attn.qkv_forward(plan, to_dev(comm, rows_of(r, n, width, 1), flavour),
                                                          to_dev(comm, rows_of(r, n, width, 2), flavour)))  # fmt: skip
    win = plan.windows(doc_lens)
    shards = [x for x in plan.q_recv if x.rows]
    assert len(win.q_len) == len(shards) and win.cu_seqlens_q[-1] == plan.q_recv_rows
    assert win.max_seqlen_q == max(win.q_len, default=0) and win.max_seqlen_k == max(win.kv_len, default=0)
    for i, x in enumerate(shards):
        starts = np.concatenate([[0], np.cumsum(doc_lens[x.src_rank])]).astype(int)
        doc_start = starts[np.searchsorted(starts, x.src_row, side="right") - 1]
        src_q = rows_of(x.src_rank, sum(doc_lens[x.src_rank]), width, 1)
        src_kv = rows_of(x.src_rank, sum(doc_lens[x.src_rank]), width, 2)
        assert win.q_len[i] == x.rows == win.cu_seqlens_q[i + 1] - win.cu_seqlens_q[i]
        np.testing.assert_array_equal(q_recv[win.cu_seqlens_q[i] : win.cu_seqlens_q[i + 1]],
                                      src_q[x.src_row : x.src_row + x.rows])  # fmt: skip
        np.testing.assert_array_equal(kv_recv[win.kv_start[i] : win.kv_start[i] + win.kv_len[i]],
                                      src_kv[doc_start : x.src_row + x.rows])  # fmt: skip
    # the long document was cut: somewhere a shard's window starts before its own rows
    later = sum(x[0] for x in comm.allgather_host(bytes([sum(k > q for k, q in zip(win.kv_len, win.q_len))])))
    assert later > 0 or comm.world_size == 1
    if comm.world_size > 1:
        with pytest.raises(sy.InvalidArgError, match=r"doc_lens: 1 ranks' lengths for a world of"):
            plan.windows(doc_lens[:1])
    attn.close()
    plan.close()


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_attn_windows_host(world: int) -> None:
    rng = np.random.default_rng(500 + world)
    doc_lens = [[int(x) for x in rng.integers(1, 40, size=int(rng.integers(0 if r else 1, 4)))] for r in range(world)]
    doc_lens[0].append(150)  # a long document, cut into shards over several ranks
    on_host(world, check_windows, doc_lens, flavours()[world % len(flavours())])


def check_windows_refused(comm: sy.Comm) -> None:
    """A description whose sequence spans two documents: refused, naming doc_lens."""
    plan = sy.AttnPlan(comm, sy.Description([[6]], [[0]], [[[0]]], 1))
    with pytest.raises(sy.InvalidArgError, match=r"doc_lens: rank 0's rows 0..5 \(sequence 0\) are not inside one"):
        plan.windows([[3, 3]])
    assert plan.windows([[6]]).kv_len == [6]
    for bad, words in (([[3, -1, 4]], r"rank 0: \[3, -1, 4\] is not a list of token counts"),
                       ([[2.5, 3.5]], r"rank 0: \[2.5, 3.5\] is not a list of token counts"),
                       ([[5]], r"rank 0's documents hold 5 tokens, its plan 6"),
                       (6, r"int for a world of 1")):  # fmt: skip
        with pytest.raises(sy.InvalidArgError, match=r"doc_lens: " + words):
            plan.windows(bad)
    plan.close()


def test_attn_windows_refused_host() -> None:
    on_host(1, check_windows_refused)


def check_bad_arguments(comm: sy.Comm) -> None:
    d = sy.Description([[4, 2], [3]], [[0, 1], [1]], None, 0)
    with pytest.raises(sy.InvalidArgError, match=r"q_dst: rank 1: 2 entries for 1 sequences"):
        sy.AttnPlan(comm, sy.Description([[4, 2], [3]], [[0, 1], [1, 0]], None, 0))
    with pytest.raises(sy.InvalidArgError, match=r"description: a Description is required"):
        sy.AttnPlan(comm, {"seq_lens": []})
    with pytest.raises(sy.InvalidArgError) as e:  # the library's check: a destination outside the world
        sy.AttnPlan(comm, sy.Description([[4, 2], [3]], [[0, 5], [1]], None, 0))
    assert e.value.call == "sy_attn_plan_create"
    plan = sy.AttnPlan(comm, d)
    attn = sy.Attn(comm, max_tokens=6)
    with pytest.raises(sy.InvalidArgError, match=r"q: shape \[5, 2\]: want \d rows"):
        attn.q_forward(plan, np.zeros((5, 2), np.float32))
    with pytest.raises(sy.InvalidArgError, match=r"out: must be a symmetric tensor"):
        attn.q_forward(plan, np.zeros((plan.num_tokens, 2), np.float32), out=np.zeros((10, 2), np.float32))
    with pytest.raises(sy.InvalidArgError, match=r"grad_rows: dtype int32"):
        attn.kv_backward(plan, np.zeros((0, 2), np.int32))
    attn.q_forward(plan, np.zeros((plan.num_tokens, 2), np.float32))  # still in step
    attn.close()
    plan.close()


def test_bad_arguments_host() -> None:
    on_host(2, check_bad_arguments)


def check_out_rows(comm: sy.Comm) -> None:
    """With out (a symmetric tensor of the plan's max_* rows, more than this rank receives), each direction returns
    the rows received, as it does without out."""
    d = sy.Description([[4, 2], [3]], [[0, 1], [0]], [[[0], [1]], [[1]]], 1)
    plan = sy.AttnPlan(comm, d)
    attn = sy.Attn(comm, max_tokens=plan.max_num_tokens)
    q = rows_of(comm.rank, plan.num_tokens, 2, 1)
    kv = rows_of(comm.rank, plan.num_tokens, 2, 2)
    q_out = comm.empty((plan.max_q_recv_rows, 2), "f32", torch=False)
    kv_out = comm.empty((plan.max_kv_recv_rows, 2), "f32", torch=False)
    back_out = comm.empty((plan.max_num_tokens, 2), "f32", torch=False)
    rows = (plan.q_recv_rows, plan.kv_recv_rows, plan.num_tokens)
    assert any(n < len(o) for n, o in zip(rows, (q_out, kv_out, back_out)))  # on every rank some out holds more

    want = attn.q_forward(plan, q)
    np.testing.assert_array_equal(attn.q_forward(plan, q, out=q_out), want)
    want_q, want_kv = attn.qkv_forward(plan, q, kv)
    got_q, got_kv = attn.qkv_forward(plan, q, kv, q_out=q_out, kv_out=kv_out)
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got_kv, want_kv)
    np.testing.assert_array_equal(attn.q_reverse(plan, want, out=back_out), attn.q_reverse(plan, want))
    attn.close()
    plan.close()


def test_out_rows_host() -> None:
    on_host(2, check_out_rows)


@gpu
def test_attn_gpu(gpu_comm: sy.Comm) -> None:
    W = gpu_comm.world_size
    check_attn(gpu_comm, random_description(W, min(2, W), 200 + W), "torch", "bf16")
