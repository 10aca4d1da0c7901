"""reference.py — what the tests expect, computed with numpy from include/switchyard.h's words alone: bf16 and
E4M3 rounding, fp32 fused multiply-adds (exact, from float64 and the sum's error term), the MoE low-latency and
high-throughput layouts and sums in the orders the header states. Nothing here calls the library."""

from __future__ import annotations

import numpy as np

f32, f64 = np.float32, np.float64


# ---- values -------------------------------------------------------------------------------------------------
def bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, round to nearest even (finite values)."""
    bits = np.ascontiguousarray(x, dtype=f32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    """bf16 bits -> fp32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(f32)


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fp32 fused multiply-add a * b + c, rounded once (nearest even): the product is exact in float64, the
    sum's rounding error is recovered (TwoSum), and a float64 sum that lands on an fp32 midpoint is settled by
    the error's sign."""
    a, b, c = (np.asarray(v, dtype=f32) for v in np.broadcast_arrays(a, b, c))
    p = a.astype(f64) * b.astype(f64)
    s = p + c.astype(f64)
    bv = s - p
    err = (p - (s - bv)) + (c.astype(f64) - bv)
    r = s.astype(f32)
    diff = s - r.astype(f64)
    other = np.nextafter(r, np.where(diff > 0, np.inf, -np.inf).astype(f32))
    midpoint = (diff != 0) & (s == (r.astype(f64) + other.astype(f64)) / 2)
    toward_other = midpoint & (err != 0) & (np.sign(err) == np.sign(diff))
    return np.where(toward_other, other, r).astype(f32)


def _e4m3_table() -> np.ndarray:
    """The 127 finite non-negative E4M3 values, by code (0 .. 126)."""
    out = []
    for code in range(127):
        e, m = code >> 3, code & 7
        out.append(m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(out, dtype=f64)


E4M3 = _e4m3_table()


def e4m3_bits(v: np.ndarray) -> np.ndarray:
    """fp32 -> E4M3, round to nearest even, saturating to +-448."""
    v = np.asarray(v, dtype=f32).astype(f64)
    mag = np.minimum(np.abs(v), 448.0)
    hi = np.clip(np.searchsorted(E4M3, mag, side="left"), 0, 126)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = mag - E4M3[lo], E4M3[hi] - mag
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(mag == E4M3[hi], hi, code)
    return (code | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


def e4m3_value(bits: np.ndarray) -> np.ndarray:
    bits = np.asarray(bits, dtype=np.uint8)
    return np.where(bits & 0x80, -1.0, 1.0) * E4M3[np.minimum(bits & 0x7F, 126)]


def quantise(x_bits: np.ndarray, ue8m0: bool) -> tuple[np.ndarray, np.ndarray]:
    """FP8 wire of bf16 tokens [n, hidden] (switchyard.h, "Wire formats"): (E4M3 [n, hidden], scales [n, hidden/128])."""
    x = bf16_value(x_bits).reshape(x_bits.shape[0], -1, 128)
    amax = np.abs(x).max(axis=2)
    scale = (amax / f32(448)).astype(f32)
    if ue8m0:
        scale = np.where(amax > 0, np.exp2(np.ceil(np.log2(scale.astype(f64)))), 1).astype(f32)
    scale = np.where(amax == 0, f32(1), scale).astype(f32)
    q = e4m3_bits((x / scale[:, :, None]).astype(f32))
    return q.reshape(x_bits.shape), scale


# ---- MoE low latency ----------------------------------------------------------------------------------------
def ll_slots(ids: list[np.ndarray], rank: int, L: int) -> list[list[tuple[int, int, int]]]:
    """Per local expert e of `rank`: its slots' (source rank, source token, k), ordered by source, then token."""
    slots: list[list[tuple[int, int, int]]] = [[] for _ in range(L)]
    for s, ids_s in enumerate(ids):
        for t in range(ids_s.shape[0]):
            for k in range(ids_s.shape[1]):
                e = int(ids_s[t, k]) - rank * L
                if 0 <= e < L:
                    slots[e].append((s, t, k))
    return slots


def ll_combine(ids_r, weights_r, expert_out, slot_of, L, per_expert, hidden) -> np.ndarray:
    """bf16 bits [T, hidden] of a combine on rank r. expert_out[p]: rank p's bf16 bits [L, S, hidden]; slot_of[p]:
    (r, t, k) -> slot on rank p."""
    T = ids_r.shape[0]
    out = np.zeros((T, hidden), dtype=f32)
    for t in range(T):
        experts = [(k, int(ids_r[t, k])) for k in range(ids_r.shape[1]) if ids_r[t, k] >= 0]
        if per_expert:
            acc = np.zeros(hidden, dtype=f32)
            for k, g in experts:
                p, e = divmod(g, L)
                y = bf16_value(expert_out[p][e, slot_of[p][(t, k)]])
                acc = fma32(np.full(hidden, weights_r[t, k], dtype=f32), y, acc)
            out[t] = acc
            continue
        total = np.zeros(hidden, dtype=f32)
        for p in sorted({g // L for _, g in experts}):
            acc = np.zeros(hidden, dtype=f32)
            for k, g in experts:
                if g // L == p:
                    y = bf16_value(expert_out[p][g % L, slot_of[p][(t, k)]])
                    acc = fma32(np.full(hidden, weights_r[t, k], dtype=f32), y, acc)
            total = (total + bf16_value(bf16_bits(acc))).astype(f32)
        out[t] = total
    return bf16_bits(out)


# ---- MoE high throughput ------------------------------------------------------------------------------------
def ht_rows(ids: list[np.ndarray], rank: int, L: int, align: int, stride: int):
    """Rank `rank`'s layout: (counts [L], offsets [L + 1], {(s, t, k): row})."""
    per_expert = ll_slots(ids, rank, L)
    counts = [len(x) for x in per_expert]
    if stride:  # the masked layout: expert e from row e * stride
        offsets = [e * stride for e in range(L + 1)]
    else:  # contiguous: each expert's rows rounded up to the alignment
        offsets = [0]
        for e in range(L):
            offsets.append(offsets[e] + -(-counts[e] // align) * align)
    row_of = {}
    for e in range(L):
        for i, (s, t, k) in enumerate(per_expert[e]):
            row_of[(s, t, k)] = offsets[e] + i
    return counts, offsets, row_of


def ht_combine(ids_r, rank_rows, rows_in, row_weights, row_values, L, hidden, add_to=None):
    """A combine on rank r: (bf16 bits [T, hidden], token_values [T, top_k]). rank_rows[p]: (r, t, k) -> row on
    rank p; rows_in[p]: rank p's bf16 bits [rows, hidden]; row_weights[p] / row_values[p]: f32 [rows] or None.
    add_to (bf16 bits [T, hidden]): sy_moe_ht_combine_add onto it (its row added after the ranks' partials, one
    rounding; a token with no expert keeps its row)."""
    T, K = ids_r.shape
    out = np.zeros((T, hidden), dtype=f32)
    values = np.zeros((T, K), dtype=f32)
    kept = np.zeros(T, dtype=bool)
    for t in range(T):
        experts = [(k, int(ids_r[t, k])) for k in range(K) if ids_r[t, k] >= 0]
        if add_to is not None and not experts:
            kept[t] = True
        for p in sorted({g // L for _, g in experts}):
            acc = np.zeros(hidden, dtype=f32)
            for k, g in experts:
                if g // L != p:
                    continue
                row = rank_rows[p][(t, k)]
                w = row_weights[p][row] if row_weights[p] is not None else f32(1)
                acc = fma32(np.full(hidden, w, dtype=f32), bf16_value(rows_in[p][row]), acc)
                if row_values[p] is not None:
                    values[t, k] = row_values[p][row]
            out[t] = (out[t] + bf16_value(bf16_bits(acc))).astype(f32)
        if add_to is not None and experts:
            out[t] = (out[t] + bf16_value(add_to[t])).astype(f32)
    bits = bf16_bits(out)
    if add_to is not None:
        bits[kept] = add_to[kept]
    return bits, values


def ht_dot(g: np.ndarray, y: np.ndarray) -> np.float32:
    """The combine backward's dot product of two fp32 vectors in the header's order: 32 lanes, lane l adding
    h = 256 j + 8 l + i (i = 0..7) ascending with fused multiply-adds from +0, then s_l += s_(l xor d) for
    d = 16, 8, 4, 2, 1; the result is s_0."""
    H = g.shape[0]
    lanes = np.zeros(32, dtype=f32)
    for base in range(0, H, 256):
        for i in range(8):
            h = base + 8 * np.arange(32) + i
            ok = h < H
            hh = np.where(ok, h, 0)
            lanes = np.where(ok, fma32(g[hh], y[hh], lanes), lanes).astype(f32)
    for d in (16, 8, 4, 2, 1):
        lanes = (lanes + lanes[np.arange(32) ^ d]).astype(f32)
    return lanes[0]
