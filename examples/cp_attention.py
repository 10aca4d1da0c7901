"""cp_attention.py — context-parallel attention in PyTorch over switchyard: documents of uneven lengths, spread over
the ranks, attended causally within each document by ranks that share the work evenly.

Every rank owns some documents (their tokens back to back: the MLP layout) and their queries, keys and values. The
steps: every rank's document lengths (a host-side allgather) -> the placement (sy.place: documents cut into shards
and the shards' queries placed so that every rank's causal work is near the mean; each shard's keys and values go
to every rank holding a later shard of its document) -> the plan (sy.AttnPlan: the rows each rank sends and
receives, and per received sequence where it came from) -> Q+KV forward (queries, keys and values to the
attention layout) -> attention per received query shard with torch's scaled_dot_product_attention, causal within
its document -> Q reverse (the outputs back to their owners' rows) -> backward: the outputs' gradient forward
(Q forward), attention's backward, the queries' gradient back (Q reverse) and the keys' and values' gradients back
summed over the ranks that used them (KV backward). The same once more through switchyard.autograd, where torch's
backward makes those calls itself. Both checked against attention over the whole documents in one process
(forward output, dQ, dK, dV).

    build/bin/syrun -n 2 python examples/cp_attention.py      # GPUs (ranks may share one: syrun -n 2 --gpus 0,0)
    python examples/cp_attention.py --host 4                  # no GPU: 4 ranks of the host backend (threads)

Prints PASS or FAIL per check and exits non-zero on a failure.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
import torch.nn.functional as F

import switchyard as sy
from switchyard import autograd

# Tolerance of every check: |got - want| <= TOL * max|want|. The shards' attention is the same arithmetic as the
# whole document's but over other batches of rows (other kernels, other rounding), and a token's dK and dV are the
# fp32 sum of the replicas' bf16 gradients, rounded once. A few bf16 roundings (2^-8 each) stay well inside 2%.
TOL = 2e-2
TIMEOUT_MS = 300_000  # host backend: a peer's reference on a CPU may keep a rank waiting at the next collective
MAX_DOCS = 8  # most documents a rank holds (the allgather of the lengths is of a fixed size)


def documents(args: argparse.Namespace, rank: int) -> list[int]:
    """Rank `rank`'s document lengths (seeded). Rank 0 also holds one long document, so the work is uneven."""
    g = np.random.default_rng(args.seed * 100 + rank)
    lens = [int(n) for n in g.integers(args.min_len, args.max_len + 1, size=int(g.integers(1, 4)))]
    return ([args.long_len] if rank == 0 else []) + lens


def gather_doc_lens(comm: sy.Comm, mine: list[int]) -> list[list[int]]:
    """Every rank's document lengths (the placement needs them all, and every rank computes the same one)."""
    padded = np.full(MAX_DOCS, -1, np.int64)
    padded[: len(mine)] = mine
    parts = comm.allgather_host(padded.tobytes())
    return [[int(n) for n in np.frombuffer(p, np.int64) if n >= 0] for p in parts]


def qkv(args: argparse.Namespace, rank: int, tokens: int, device: torch.device) -> list[torch.Tensor]:
    """Rank `rank`'s queries, keys and values (bf16 [tokens, heads, head_dim] each; seeded)."""
    g = torch.Generator().manual_seed(args.seed * 100 + rank + 1)
    return [torch.randn(tokens, args.heads, args.head_dim, generator=g).to(device, torch.bfloat16) for _ in range(3)]


def attend(q_recv: torch.Tensor, kv_recv: torch.Tensor, win: sy.Windows) -> torch.Tensor:
    """Causal attention of each query shard over its document's keys up to its last query (the plan's windows,
    AttnPlan.windows): its last query sees every key of the window, its first all but the shard's other rows
    (bottom-right causal). Rows are [tokens, heads, head_dim]; SDPA wants [heads, tokens, head_dim]. With
    flash-attention: its varlen call per window, or cu_seqlens_q with the windows' keys gathered."""
    out = torch.zeros_like(q_recv)
    cu = win.cu_seqlens_q
    for i, (start, n) in enumerate(zip(win.kv_start, win.kv_len)):
        q = q_recv[cu[i] : cu[i + 1]].transpose(0, 1)
        k, v = kv_recv[start : start + n, 0].transpose(0, 1), kv_recv[start : start + n, 1].transpose(0, 1)
        causal = torch.ones(q.shape[1], n, dtype=torch.bool, device=q.device).tril(diagonal=n - q.shape[1])
        out[cu[i] : cu[i + 1]] = F.scaled_dot_product_attention(q, k, v, attn_mask=causal).transpose(0, 1)
    return out


def attend_backward(o_recv: torch.Tensor, d_o_recv: torch.Tensor, q_recv: torch.Tensor,
                    kv_recv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Attention's backward here: the gradients of q_recv and kv_recv (zeros where no query shard used them)."""
    if not o_recv.requires_grad:  # no query shard arrived here
        return torch.zeros_like(q_recv), torch.zeros_like(kv_recv)
    return torch.autograd.grad(o_recv, (q_recv, kv_recv), d_o_recv, allow_unused=True, materialize_grads=True)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_lens: list[int]) -> torch.Tensor:
    """Causal attention over each whole document, in one process."""
    outs = []
    for rows in torch.arange(q.shape[0], device=q.device).split(doc_lens):
        qd, kd, vd = (x[rows].transpose(0, 1) for x in (q, k, v))
        outs.append(F.scaled_dot_product_attention(qd, kd, vd, is_causal=True).transpose(0, 1))
    return torch.cat(outs)


def check(comm: sy.Comm, name: str, got: torch.Tensor, want: torch.Tensor) -> bool:
    """Prints PASS or FAIL: the largest difference against TOL times the largest reference value."""
    err = (got.float() - want.float()).abs().max().item() if got.numel() else 0.0
    scale = want.float().abs().max().item() if want.numel() else 0.0
    ok = got.shape == want.shape and err <= TOL * scale
    say(comm, f"{'PASS' if ok else 'FAIL'} {name}: max |diff| {err:.3g}, max |want| {scale:.3g}, tol {TOL:g}")
    return ok


def say(comm: sy.Comm, line: str) -> None:
    """One line, whole (host-backend ranks are threads of this process; syrun prefixes its ranks' lines)."""
    who = f"[rank {comm.rank}] " if comm.backend == "host" else ""
    sys.stdout.write(f"{who}{line}\n")
    sys.stdout.flush()


def make_plan(comm: sy.Comm, row_bytes: int, doc_lens: list[list[int]]) -> tuple[sy.AttnPlan, sy.Attn]:
    """Documents -> placement -> plan. Every rank computes the same placement from every rank's lengths and builds
    its own plan from it; the Attn object holds what the four directions need between calls."""
    placement = sy.place(doc_lens, q_row_bytes=row_bytes, kv_row_bytes=2 * row_bytes)
    if comm.rank == 0:
        st = placement.stats
        say(comm, f"placement: {st['shards']} shards, work max/mean {st['max_over_mean']:.3f}, "
                  f"{st['q_rows_moved']} query rows moved, {st['kv_rows_moved']} key/value rows sent")  # fmt: skip
    plan = sy.AttnPlan(comm, placement.description)
    attn = sy.Attn(comm, max_tokens=max(1, plan.max_num_tokens), max_replicas=placement.description.max_replicas,
                   max_kv_grad_row_bytes=2 * row_bytes)  # fmt: skip
    return plan, attn


def forward_backward(attn: sy.Attn, plan: sy.AttnPlan, win: sy.Windows, q: torch.Tensor, k: torch.Tensor,
                     v: torch.Tensor, d_out: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """Context-parallel attention of this rank's tokens, forward and backward: returns, on the owner's rows, the
    output and the gradients dQ, dK, dV of the loss whose gradient at the output is d_out. Every call of attn is
    collective: every rank makes the same calls in the same order."""
    # forward: queries, keys and values to the attention layout (one row per token: its key and value together),
    # attention there, the outputs back to their owners
    q_recv, kv_recv = attn.qkv_forward(plan, q, torch.stack((k, v), dim=1))
    q_recv.requires_grad_(), kv_recv.requires_grad_()
    o_recv = attend(q_recv, kv_recv, win)
    out = attn.q_reverse(plan, o_recv.detach())
    # backward: the output's gradient to the attention layout, attention's backward there, then dQ back to its
    # owners and dK, dV back summed over the ranks that used them (in fp32, in replica order: deterministic)
    dq_recv, dkv_recv = attend_backward(o_recv, attn.q_forward(plan, d_out), q_recv, kv_recv)
    dq, dkv = attn.q_reverse(plan, dq_recv), attn.kv_backward(plan, dkv_recv)
    return out, dq, dkv[:, 0], dkv[:, 1]


def forward_backward_autograd(attn: sy.Attn, plan: sy.AttnPlan, win: sy.Windows, q: torch.Tensor, k: torch.Tensor,
                              v: torch.Tensor, d_out: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """The same through switchyard.autograd: the directions are differentiable, so the forward is three lines and
    torch's backward makes the Q forward, Q reverse and KV backward calls (collective: every rank runs it)."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    q_recv, kv_recv = autograd.qkv_forward(attn, plan, q, torch.stack((k, v), dim=1))
    o_recv = attend(q_recv, kv_recv, win)
    if not o_recv.requires_grad:  # no query shard arrived here: the rank stays in the graph (a collective backward)
        o_recv = o_recv + 0 * q_recv
    out = autograd.q_reverse(attn, plan, o_recv)
    return (out.detach(), *torch.autograd.grad(out, (q, k, v), d_out))


def run(comm: sy.Comm, args: argparse.Namespace) -> bool:
    """One rank's program; True when every check passed."""
    device = torch.device(f"cuda:{comm.device}") if comm.backend == "cuda" else torch.device("cpu")
    row_bytes = args.heads * args.head_dim * 2  # one token's queries (bf16); keys and values: twice that
    doc_lens = gather_doc_lens(comm, documents(args, comm.rank))
    plan, attn = make_plan(comm, row_bytes, doc_lens)
    q, k, v = qkv(args, comm.rank, plan.num_tokens, device)
    d_out = qkv(args, comm.rank + 1000, plan.num_tokens, device)[0]  # the loss's gradient at the output (seeded)
    win = plan.windows(doc_lens)  # each arrived query shard's rows and its document's keys here
    got = forward_backward(attn, plan, win, q, k, v, d_out)
    got_autograd = forward_backward_autograd(attn, plan, win, q, k, v, d_out)
    attn.close()
    plan.close()

    # the reference: the owner's whole documents in one process, the same gradient at the output
    q_ref, k_ref, v_ref = (x.clone().requires_grad_() for x in (q, k, v))
    out_ref = reference(q_ref, k_ref, v_ref, doc_lens[comm.rank])
    want = (out_ref, *torch.autograd.grad(out_ref, (q_ref, k_ref, v_ref), d_out))
    names = ("attention output", "dQ", "dK", "dV")
    ok = [check(comm, name, g, w) for name, g, w in zip(names, got, want)]
    ok += [check(comm, f"{name} (autograd)", g, w) for name, g, w in zip(names, got_autograd, want)]
    return all(ok)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--host", type=int, metavar="N", help="run N ranks of the host backend here (threads, CPU)")
    p.add_argument("--heads", type=int, help="attention heads (GPU 8, host 2)")
    p.add_argument("--head-dim", type=int, help="elements per head (GPU 128, host 32)")
    p.add_argument("--min-len", type=int, help="shortest document, tokens (GPU 256, host 8)")
    p.add_argument("--max-len", type=int, help="longest document but rank 0's long one, tokens (GPU 2048, host 64)")
    p.add_argument("--long-len", type=int, help="rank 0's long document, tokens (GPU 8192, host 256)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    small = args.host is not None or not torch.cuda.is_available()
    for name, gpu, host in (("heads", 8, 2), ("head_dim", 128, 32), ("min_len", 256, 8), ("max_len", 2048, 64),
                            ("long_len", 8192, 256)):  # fmt: skip
        if getattr(args, name) is None:
            setattr(args, name, host if small else gpu)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.host is not None:
        torch.set_num_threads(1)  # the ranks are the threads
        passed = sy.host_ranks(args.host, run, args, timeout_ms=TIMEOUT_MS)
    else:
        with sy.Comm.from_env() as comm:  # syrun / torchrun; one rank without a launcher
            passed = [run(comm, args)]
    return 0 if all(passed) else 1


if __name__ == "__main__":
    sys.exit(main())
