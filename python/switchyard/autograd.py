"""autograd.py — the MoE high-throughput dispatch and combine, and the attention directions, as
torch.autograd.Functions.

The backward of each is a call of the same step's handle (switchyard.h, "MoE high throughput"), no new
layout:
- dispatch (tokens x, routing weights w -> rows, row weights): rows[r] = x[t], row_weights[r] = w[t][k]. Its
  backward is a combine of the rows' gradient with no weights (dx[t] = sum of its rows' gradients, in the
  combine's order and rounding), with the row weights' gradient carried back to [T, top_k] (row_values ->
  token_values).
- combine (rows y, row weights -> out): out[t] = sum w_r y_r. Its backward is sy_moe_ht_combine_backward:
  dy_r = bf16(w_r g[t]) and dw_r = <g[t], y_r>.
- the attention directions (switchyard.h, "Context-parallel attention dispatch"): Q forward moves each sent
  sequence's rows to one rank, so its backward is Q reverse (the gradient of unsent rows is zero) and Q reverse's
  is Q forward; the KV forward copies each sequence's rows to its replicas, so its backward is the KV backward,
  which sums the replicas' gradients (fp32, replica order, rounded once).
Every backward call is collective: every rank must run the backward of every step (torch runs a graph's
backward in the same order on every rank when the ranks build the same graph). The MoE's BF16 wire only: FP8
rows have no gradient.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .attn import Attn, AttnPlan
from .errors import invalid
from .moe_ht import HTRecv, Layout, MoEHT


class _Dispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tokens: Any, weights: Any, moe: MoEHT, layout: Layout, expert_stride: int) -> Any:
        recv = moe.dispatch(layout, tokens, weights, expert_stride=expert_stride)
        # no output on ctx: ctx belongs to the outputs' grad_fn, so output -> grad_fn -> ctx -> output would be a
        # cycle through C++ that Python's gc cannot see (every step's receive buffers kept); save_for_backward keeps
        # outputs without one, and the combine of the backward reads only the header (src, offsets, counts)
        ctx.moe, ctx.layout, ctx.has_weights = moe, layout, weights is not None
        ctx.rows, ctx.expert_stride = recv.rows, recv.expert_stride
        ctx.save_for_backward(recv.src, recv.expert_offsets, recv.expert_counts)
        ctx.mark_non_differentiable(recv.src, recv.expert_offsets, recv.expert_counts)
        return recv.tokens, recv.weights, recv.src, recv.expert_offsets, recv.expert_counts

    @staticmethod
    def backward(ctx: Any, grad_rows: Any, grad_row_weights: Any, *_: Any) -> Any:
        moe, layout = ctx.moe, ctx.layout
        src, offsets, counts = ctx.saved_tensors
        recv = HTRecv(None, None, src, None, offsets, counts, ctx.rows, ctx.expert_stride)
        if grad_rows is None:
            grad_rows = torch.zeros((ctx.rows, moe.hidden), dtype=torch.bfloat16, device=src.device)
        row_values = None
        if ctx.has_weights:
            row_values = grad_row_weights if grad_row_weights is not None else torch.zeros(ctx.rows, device=src.device)
            row_values = row_values.contiguous()
        result = moe.combine(layout, grad_rows.contiguous(), recv, row_values=row_values)
        grad_x, grad_w = result if ctx.has_weights else (result, None)
        return grad_x, grad_w, None, None, None


class _Combine(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, rows: Any, row_weights: Any, moe: MoEHT, layout: Layout, recv: HTRecv) -> Any:
        out = moe.combine(layout, rows, recv, row_weights=row_weights)
        ctx.moe, ctx.layout, ctx.recv = moe, layout, recv
        ctx.save_for_backward(rows, row_weights)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Any) -> Any:
        rows, row_weights = ctx.saved_tensors
        want_w = row_weights is not None and ctx.needs_input_grad[1]
        result = ctx.moe.combine_backward(ctx.layout, grad_out.contiguous(), ctx.recv, row_weights=row_weights,
                                          rows_in=rows, weights_grad=want_w)  # fmt: skip
        grad_rows, grad_w = result if want_w else (result, None)
        return grad_rows, grad_w, None, None, None


def dispatch(moe: MoEHT, layout: Layout, tokens: Any, weights: Any = None, *, expert_stride: int = 0) -> HTRecv:
    """Differentiable sy_moe_ht_dispatch: returns an HTRecv whose tokens ([rows, hidden] bf16) and weights
    ([rows] f32) carry gradients back to tokens ([T, hidden] bf16) and weights ([T, top_k] f32)."""
    if moe.wire != "bf16":
        raise invalid("moe", f"wire {moe.wire!r}: the differentiable dispatch needs the 'bf16' wire", "autograd.dispatch")
    rows, row_weights, src, offsets, counts = _Dispatch.apply(tokens, weights, moe, layout, expert_stride)
    R = rows.shape[0]
    return HTRecv(rows, None, src, row_weights, offsets, counts, R, expert_stride)


def combine(moe: MoEHT, layout: Layout, rows: Any, recv: HTRecv, row_weights: Any = None) -> Any:
    """Differentiable sy_moe_ht_combine: out[t] = sum over t's rows of row_weights[r] * rows[r] (bf16 [T,
    hidden]), with gradients to rows and row_weights (e.g. recv.weights of a differentiable dispatch)."""
    return _Combine.apply(rows, row_weights, moe, layout, recv)


class _Move(torch.autograd.Function):
    """Q forward or Q reverse (`there`), whose backward is the other (`back`): each is the other's adjoint."""

    @staticmethod
    def forward(ctx: Any, rows: Any, attn: Attn, plan: AttnPlan, there: str, back: str) -> Any:
        ctx.attn, ctx.plan, ctx.back = attn, plan, back
        return getattr(attn, there)(plan, rows)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return getattr(ctx.attn, ctx.back)(ctx.plan, grad.contiguous()), None, None, None, None


class _QKVForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: Any, kv: Any, attn: Attn, plan: AttnPlan) -> Any:
        ctx.attn, ctx.plan = attn, plan
        q_recv, kv_recv = attn.qkv_forward(plan, q, kv)
        ctx.shapes = (tuple(q_recv.shape), q_recv.dtype, tuple(kv_recv.shape), kv_recv.dtype)
        return q_recv, kv_recv

    @staticmethod
    def backward(ctx: Any, grad_q: Any, grad_kv: Any) -> Any:
        attn, plan = ctx.attn, ctx.plan
        q_shape, q_dtype, kv_shape, kv_dtype = ctx.shapes
        if grad_q is None:
            grad_q = torch.zeros(q_shape, dtype=q_dtype, device=_device(attn))
        if grad_kv is None:
            grad_kv = torch.zeros(kv_shape, dtype=kv_dtype, device=_device(attn))
        # both calls are collective: every rank makes both, whichever gradients it needs
        return attn.q_reverse(plan, grad_q.contiguous()), attn.kv_backward(plan, grad_kv.contiguous()), None, None


def _device(attn: Attn) -> Any:
    return torch.device("cuda", attn.comm.device) if attn.comm.backend == "cuda" else torch.device("cpu")


def q_forward(attn: Attn, plan: AttnPlan, q: Any) -> Any:
    """Differentiable Attn.q_forward: this rank's rows q ([plan.num_tokens, ...]) to the attention layout
    ([plan.q_recv_rows, ...]); the backward brings the gradient back by Q reverse."""
    return _Move.apply(q, attn, plan, "q_forward", "q_reverse")


def q_reverse(attn: Attn, plan: AttnPlan, rows: Any) -> Any:
    """Differentiable Attn.q_reverse: attention-layout rows ([plan.q_recv_rows, ...], e.g. the attention output)
    back to their owners' rows ([plan.num_tokens, ...]); the backward sends the gradient forward again."""
    return _Move.apply(rows, attn, plan, "q_reverse", "q_forward")


def qkv_forward(attn: Attn, plan: AttnPlan, q: Any, kv: Any) -> tuple[Any, Any]:
    """Differentiable Attn.qkv_forward: returns (q_recv, kv_recv); the backward is Q reverse for q and the KV
    backward (each sequence's replicas' gradients summed) for kv, so kv's dtype must be one the KV backward sums
    (bf16, f16, f32) and its row within the Attn's max_kv_grad_row_bytes."""
    call = "autograd.qkv_forward"
    if kv.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise invalid("kv", f"dtype {kv.dtype}: the KV backward sums bf16, f16 or f32 rows", call)
    row_bytes = kv.element_size() * math.prod(kv.shape[1:])
    if row_bytes > attn.max_kv_grad_row_bytes:
        raise invalid("attn", f"max_kv_grad_row_bytes={attn.max_kv_grad_row_bytes}: the KV backward of {row_bytes}-byte "
                      "rows needs at least that (sy.Attn(..., max_kv_grad_row_bytes=...))", call)  # fmt: skip
    return _QKVForward.apply(q, kv, attn, plan)
