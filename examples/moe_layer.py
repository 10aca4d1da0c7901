"""moe_layer.py — an expert-parallel MoE layer in PyTorch over switchyard: training with the high-throughput mode
(sy.MoEHT and the autograd functions of switchyard.autograd), decoding with the low-latency mode (sy.MoE).

Each rank holds L experts (a two-matmul FFN with SiLU) and a router shared by every rank. A training step, per
micro-batch: route (the router's top-k), layout, dispatch (tokens to their experts' ranks, each local expert's rows
contiguous), the FFN of each local expert over its rows, combine (each token's weighted sum back on its rank),
loss; then backward through the combine and the dispatch. Two micro-batches run on two torch streams, the
communication on one and the FFNs on the other, so one micro-batch's dispatch and combine run beside the other's
FFNs. A decode step does the same forward with the low-latency calls, eagerly and then captured in a CUDA graph and
replayed. Every result is checked against the same layer computed in one process (every expert, the same weights,
the same routing).

    build/bin/syrun -n 2 python examples/moe_layer.py      # GPUs (ranks may share one: syrun -n 2 --gpus 0,0)
    python examples/moe_layer.py --host 4                  # no GPU: 4 ranks of the host backend (threads)

Prints PASS or FAIL per check and exits non-zero on a failure. On the host backend the streams are one (the calls
run in order) and the graph is skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import switchyard as sy
from switchyard import autograd

# Tolerance of every check: |got - want| <= TOL * max|want|. The layer rounds to bf16 (8 significant bits,
# 2^-8 = 0.4%) at other points than the one-process reference: the dispatch's rank-level partial sums, the
# matmuls over other batches of rows, the gradients' sums. A few such roundings stay well inside 2%.
TOL = 2e-2
TIMEOUT_MS = 300_000  # host backend: a peer's reference on a CPU may keep a rank waiting at the next collective


@dataclass
class Layer:
    """The layer's parameters: the router (fp32 [H, E]) and every expert's FFN (bf16 [E, H, F] and [E, F, H])."""

    router: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    top_k: int


def make_layer(args: argparse.Namespace, experts: int, device: torch.device) -> Layer:
    """The same parameters on every rank (seeded), so each rank can also compute the whole layer alone."""
    g = torch.Generator().manual_seed(args.seed)
    H, Fd = args.hidden, args.ffn
    router = torch.randn(H, experts, generator=g) / H**0.5
    w1 = torch.randn(experts, H, Fd, generator=g) / H**0.5
    w2 = torch.randn(experts, Fd, H, generator=g) / Fd**0.5
    return Layer(router.to(device), w1.to(device, torch.bfloat16), w2.to(device, torch.bfloat16), args.top_k)


def tokens(args: argparse.Namespace, rank: int, batch: int, count: int, device: torch.device) -> torch.Tensor:
    """Rank `rank`'s tokens of batch `batch` (bf16 [count, H]); any rank can make any rank's."""
    g = torch.Generator().manual_seed(args.seed * 1000 + rank * 10 + batch + 1)
    return torch.randn(count, args.hidden, generator=g).to(device, torch.bfloat16)


def route(x: torch.Tensor, layer: Layer) -> tuple[torch.Tensor, torch.Tensor]:
    """The router: each token's top-k experts (int64 [T, k]) and their weights (fp32 [T, k], a softmax over the
    k chosen logits, differentiable back to x and the router)."""
    logits = x.float() @ layer.router
    top = logits.topk(layer.top_k, dim=1)
    return top.indices, top.values.softmax(dim=1)


def expert_ffn(rows: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert (or a batch of experts, with bmm's shapes): bf16 rows in, bf16 rows out."""
    return F.silu(rows @ w1) @ w2


# ---- training: the high-throughput mode -----------------------------------------------------------------------


def dispatch(moe: sy.MoEHT, x: torch.Tensor, layer: Layer) -> tuple[sy.Layout, sy.HTRecv]:
    """Route, then send each token to its experts' ranks. The layout with exact counts tells the host each local
    expert's rows (to size its matmuls); the dispatch's rows and row weights carry gradients back to x."""
    ids, weights = route(x, layer)
    layout = moe.layout(ids)
    return layout, autograd.dispatch(moe, layout, x, weights)


def local_experts(layout: sy.Layout, recv: sy.HTRecv, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Every local expert's FFN over its rows (contiguous: rows offsets[e] .. offsets[e] + counts[e] of recv).
    The padding rows between experts stay zero; the combine never reads them."""
    y = torch.zeros_like(recv.tokens)
    for e, (first, count) in enumerate(zip(layout.offsets, layout.counts)):
        rows = slice(first, first + count)
        y[rows] = expert_ffn(recv.tokens[rows], w1[e], w2[e])
    return y


def combine(moe: sy.MoEHT, layout: sy.Layout, recv: sy.HTRecv, y: torch.Tensor) -> torch.Tensor:
    """Each token's experts' outputs, weighted by its routing weights, summed back on its rank (bf16 [T, H])."""
    return autograd.combine(moe, layout, y, recv, recv.weights)


class Streams:
    """The communication stream and the compute stream, and events between them (GPU). On the host backend
    there are no streams: every call runs to its end in program order, so the handoffs do nothing."""

    def __init__(self, device: torch.device):
        gpu = device.type == "cuda"
        self.comm = torch.cuda.Stream() if gpu else None
        self.compute = torch.cuda.Stream() if gpu else None
        if gpu:  # both start after what the current stream has done (the inputs)
            self.comm.wait_stream(torch.cuda.current_stream())
            self.compute.wait_stream(torch.cuda.current_stream())

    def on(self, stream: torch.cuda.Stream | None):
        """torch's work (and switchyard's calls, which take torch's current stream) goes to `stream` inside."""
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def mark(self, stream: torch.cuda.Stream | None) -> torch.cuda.Event | None:
        """An event at what `stream` has been given so far."""
        return stream.record_event() if stream is not None else None

    def wait(self, stream: torch.cuda.Stream | None, event: torch.cuda.Event | None) -> None:
        if stream is not None:
            stream.wait_event(event)

    def used(self, stream: torch.cuda.Stream | None, *tensors: torch.Tensor) -> None:
        """Tensors made on one stream and read on `stream`: their memory is not handed to new tensors until
        `stream`'s work so far is done (torch's caching allocator reuses a dead tensor's memory on the stream that
        made it at once). switchyard's calls mark what they read themselves."""
        if stream is not None:
            for t in tensors:
                t.record_stream(stream)

    def join(self) -> None:
        """The current stream waits for both (before the loss reads the outputs)."""
        for s in (self.comm, self.compute):
            if s is not None:
                torch.cuda.current_stream().wait_stream(s)


def forward_micro_batches(moe: sy.MoEHT, xs: list[torch.Tensor], layer: Layer, w1: torch.Tensor,
                          w2: torch.Tensor, streams: Streams) -> list[torch.Tensor]:  # fmt: skip
    """The forward of each micro-batch: switchyard's calls in order on the communication stream (they are
    collective and one object's calls go one at a time), the FFNs on the compute stream, each waiting for what it
    reads. Enqueued as route+dispatch 1, FFN 1, route+dispatch 2, FFN 2, combine 1, combine 2: dispatch 2 runs
    beside FFN 1 and combine 1 beside FFN 2. Autograd runs each backward op on its forward op's stream."""
    pending = []
    for x in xs:
        with streams.on(streams.comm):
            layout, recv = dispatch(moe, x, layer)
            dispatched = streams.mark(streams.comm)
        with streams.on(streams.compute):
            streams.wait(streams.compute, dispatched)
            streams.used(streams.compute, recv.tokens)
            y = local_experts(layout, recv, w1, w2)
            pending.append((layout, recv, y, streams.mark(streams.compute)))
    outs = []
    for layout, recv, y, computed in pending:
        with streams.on(streams.comm):
            streams.wait(streams.comm, computed)
            outs.append(combine(moe, layout, recv, y))
    streams.join()
    return outs


# ---- decode: the low-latency mode ----------------------------------------------------------------------------


def decode_step(moe: sy.MoE, x: torch.Tensor, layer: Layer, w1: torch.Tensor, w2: torch.Tensor,
                recv: sy.MoERecv) -> torch.Tensor:  # fmt: skip
    """One decode forward: dispatch into each local expert's S slots, the FFN over every slot of every local
    expert at once (bmm over [L, S, H]; slots past an expert's count are never read back), combine. Allocates
    nothing in switchyard and waits for nothing on the host, so it can be captured in a CUDA graph."""
    ids, weights = route(x, layer)
    moe.dispatch(x, ids, weights, recv=recv)  # the default mode reads the weights here, on the experts' ranks
    y = expert_ffn(recv.tokens, w1, w2)
    return moe.combine(y, ids, weights)


def capture_decode(moe: sy.MoE, x: torch.Tensor, layer: Layer, w1: torch.Tensor, w2: torch.Tensor,
                   recv: sy.MoERecv) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The decode step captured in a CUDA graph: returns (graph, its input x, its output). Copy the next batch
    into x and replay. Warmed up first on a side stream, as torch.cuda.graph asks (one whole round: the
    low-latency object's graph must hold dispatch and combine both)."""
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        decode_step(moe, static_x, layer, w1, w2, recv)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = decode_step(moe, static_x, layer, w1, w2, recv)
    return graph, static_x, static_out


# ---- the reference: the same layer in one process -------------------------------------------------------------


def reference(xs: list[torch.Tensor], layer: Layer) -> list[torch.Tensor]:
    """The layer over several batches of tokens in one process, every expert here: each batch routed on its own
    (as each rank routes its own), each expert's FFN over all its tokens at once, each token's experts' outputs
    summed by its routing weights in fp32 and rounded once."""
    routes = [route(x, layer) for x in xs]
    x, ids, weights = torch.cat(xs), torch.cat([r[0] for r in routes]), torch.cat([r[1] for r in routes])
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for e in range(layer.w1.shape[0]):
        token, k = (ids == e).nonzero(as_tuple=True)
        y = expert_ffn(x[token], layer.w1[e], layer.w2[e])
        out = out.index_add(0, token, weights[token, k, None] * y.float())
    return list(out.to(torch.bfloat16).split([len(x) for x in xs]))


def loss_of(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out.float(), target.float())


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


# ---- the program ---------------------------------------------------------------------------------------------


def train(comm: sy.Comm, args: argparse.Namespace, layer: Layer, device: torch.device) -> list[bool]:
    """Forward and backward of two micro-batches; checks outputs, the tokens' gradients and the local experts'
    weight gradients against the one-process layer over every rank's micro-batches."""
    W, L, T, mbs = comm.world_size, args.experts_per_rank, args.tokens, 2
    mine = slice(comm.rank * L, (comm.rank + 1) * L)
    w1 = layer.w1[mine].clone().requires_grad_()  # this rank's experts: the parameters it trains
    w2 = layer.w2[mine].clone().requires_grad_()
    moe = sy.MoEHT(comm, max_tokens=T, hidden=args.hidden, top_k=args.top_k, num_experts=W * L, expert_alignment=8)
    xs = [tokens(args, comm.rank, b, T, device).requires_grad_() for b in range(mbs)]
    targets = [tokens(args, comm.rank, mbs + b, T, device) for b in range(mbs)]

    outs = forward_micro_batches(moe, xs, layer, w1, w2, Streams(device))
    sum(loss_of(out, target) for out, target in zip(outs, targets)).backward()  # collective: every rank runs it

    # the reference: every rank's micro-batches in one process; the loss the sum of every rank's
    ref = Layer(layer.router, layer.w1.clone().requires_grad_(), layer.w2.clone().requires_grad_(), layer.top_k)
    batches = [(r, b) for r in range(W) for b in range(mbs)]
    ref_xs = {(r, b): tokens(args, r, b, T, device).requires_grad_() for r, b in batches}
    ref_outs = dict(zip(batches, reference([ref_xs[rb] for rb in batches], ref)))
    sum(loss_of(ref_outs[r, b], tokens(args, r, mbs + b, T, device)) for r, b in batches).backward()

    ok = []
    for b in range(mbs):
        ok.append(check(comm, f"train forward, micro-batch {b}", outs[b], ref_outs[comm.rank, b]))
        ok.append(check(comm, f"train d(tokens), micro-batch {b}", xs[b].grad, ref_xs[comm.rank, b].grad))
    ok.append(check(comm, "train d(w1) of the local experts", w1.grad, ref.w1.grad[mine]))
    ok.append(check(comm, "train d(w2) of the local experts", w2.grad, ref.w2.grad[mine]))
    moe.close()
    return ok


@torch.no_grad()
def decode(comm: sy.Comm, args: argparse.Namespace, layer: Layer, device: torch.device) -> list[bool]:
    """A decode step eagerly, then captured in a CUDA graph and replayed on the next batch (GPU only)."""
    W, L, T = comm.world_size, args.experts_per_rank, args.decode_tokens
    mine = slice(comm.rank * L, (comm.rank + 1) * L)
    w1, w2 = layer.w1[mine], layer.w2[mine]
    moe = sy.MoE(comm, max_tokens=T, hidden=args.hidden, top_k=args.top_k, num_experts=W * L, wire="bf16")
    recv = moe.alloc_recv()  # reused by every step (and by the graph)
    recv.tokens.zero_()  # slots past an expert's count are left as they were: no uninitialised memory in the FFN

    x = tokens(args, comm.rank, 100, T, device)
    ok = [check(comm, "decode forward", decode_step(moe, x, layer, w1, w2, recv), reference([x], layer)[0])]
    if device.type != "cuda":
        say(comm, "skip decode in a CUDA graph: the host backend has no graphs")
    else:
        graph, static_x, static_out = capture_decode(moe, x, layer, w1, w2, recv)
        for step in range(2):  # new tokens each replay
            x = tokens(args, comm.rank, 101 + step, T, device)
            static_x.copy_(x)
            graph.replay()
            ok.append(check(comm, f"decode forward, graph replay {step}", static_out, reference([x], layer)[0]))
        torch.cuda.synchronize()
    moe.close()
    return ok


def run(comm: sy.Comm, args: argparse.Namespace) -> bool:
    """One rank's program: the layer, the training step, the decode step; True when every check passed."""
    device = torch.device(f"cuda:{comm.device}") if comm.backend == "cuda" else torch.device("cpu")
    layer = make_layer(args, comm.world_size * args.experts_per_rank, device)
    ok = train(comm, args, layer, device) + decode(comm, args, layer, device)
    return all(ok)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--host", type=int, metavar="N", help="run N ranks of the host backend here (threads, CPU)")
    p.add_argument("--tokens", type=int, help="tokens of a rank's training micro-batch (GPU 512, host 32)")
    p.add_argument("--decode-tokens", type=int, default=8, help="tokens of a rank's decode step (8)")
    p.add_argument("--hidden", type=int, help="hidden size, a multiple of 8 (GPU 1024, host 128)")
    p.add_argument("--ffn", type=int, help="each expert's inner size (GPU 2048, host 256)")
    p.add_argument("--experts-per-rank", type=int, default=2, help="L (2)")
    p.add_argument("--top-k", type=int, default=2, help="experts per token (2)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    small = args.host is not None or not torch.cuda.is_available()
    args.tokens = args.tokens or (32 if small else 512)
    args.hidden = args.hidden or (128 if small else 1024)
    args.ffn = args.ffn or (256 if small else 2048)
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
