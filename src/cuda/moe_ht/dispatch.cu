/*
 * dispatch.cu — sy_moe_ht_dispatch on the GPU: one kernel of 2 C blocks (C = channels).
 *   blocks [0, C)   send: block c walks channel c's tokens in order, HT_BATCH at a time. Thread 0 gives each
 *                   (token, destination rank) its ring index and waits (bounded) until each destination's ring
 *                   has room; then a warp per token writes its message into every destination's ring (header,
 *                   entries, payload: bf16 as is, FP8 quantised per 128 elements with a group per warp pass, or
 *                   the given E4M3 bytes and scales), reading each 512-byte piece of the token once for all
 *                   destinations; then one fence and a tail store per destination.
 *   blocks [C, 2C)  receive: block C + c walks the sources round robin and takes what ring (s -> me, c) holds,
 *                   HT_BATCH at a time, a warp per message: each entry's row is rowbase[s][e] + position (the
 *                   handle's offsets and counts: rows of expert e from sources before s), and the payload goes
 *                   to every row of the token here (the expansion), with its scales, {s, token} and weight; the
 *                   rows are remembered in the handle (recv_rows) for the combines. Then the head store that
 *                   gives the sender its slots back. It also writes the padding rows of its experts and (block C)
 *                   the offsets and counts.
 * A layout that needs more rows than the caller gave is reported (OP_MOE_HT_ROWS) and the messages are
 * consumed without writing a row, so no sender waits in vain.
 */
#include "cuda/moe_ht/ht.cuh"

using namespace sy;

namespace {

struct send_batch {
  int ndst[HT_BATCH];
  int dst[HT_BATCH][32];
  uint64_t slot[HT_BATCH][32];
};

/* FP8 in the kernel: a 128-element group per pass, 4 elements a lane, stored for every destination. */
template <typename Body>
__device__ void quantise_token(const ht_params &P, int t, int nd, Body body_of) {
  const int lane = threadIdx.x & 31;
  const size_t po = P.wl.payload_offset, so = P.wl.scales_offset;
  const int ue8m0 = P.wire == SY_MOE_WIRE_FP8_UE8M0;
  const uint16_t *src = (const uint16_t *)P.tokens + (size_t)t * P.hidden;
  for (int g = 0; g < P.hidden / SY_MOE_FP8_GROUP; g++) {
    const uint2 raw = __ldg((const uint2 *)(src + g * 128 + lane * 4));
    float x[4] = {sy__bf16_to_float((uint16_t)(raw.x & 0xffff)), sy__bf16_to_float((uint16_t)(raw.x >> 16)),
                  sy__bf16_to_float((uint16_t)(raw.y & 0xffff)), sy__bf16_to_float((uint16_t)(raw.y >> 16))};
    float amax = 0.0f;
    for (int i = 0; i < 4; i++) amax = fmaxf(amax, fabsf(x[i]));
    for (int d = 16; d > 0; d >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, d));
    const float scale = sy__fp8_scale(amax, ue8m0);
    uint32_t q = 0;
    for (int i = 0; i < 4; i++) q |= (uint32_t)sy__fp8_quantize(x[i], scale) << (8 * i);
    for (int j = 0; j < nd; j++) {
      char *b = body_of(j);
      ((uint32_t *)(b + g * 128))[lane] = q;
      if (lane == 0) ((float *)(b + (so - po)))[g] = scale;
    }
  }
}

/* A warp writes token t's message into each destination's ring: header and entries, then the payload in 512-byte
 * pieces (bf16: 16 bytes a lane; FP8: a 128-element group a pass, 4 elements a lane). */
__device__ void send_token(const ht_params &P, int c, int t, const int *dst, const uint64_t *slot, int nd) {
  const int lane = threadIdx.x & 31, me = P.ctx.rank, L = P.L;
  const int32_t *ids = hsec(P, P.hl.ids) + (size_t)t * P.K, *pos = hsec(P, P.hl.pos) + (size_t)t * P.K;
  const int e = lane < P.K ? ids[lane] : -1;
  const float w = (lane < P.K && P.weights) ? P.weights[(size_t)t * P.K + lane] : 0.0f;
  const size_t po = P.wl.payload_offset, so = P.wl.scales_offset, pay = P.wl.msg_bytes - po;
  char *stage = P.staging ? ht_stage(P) : nullptr;
  bool puts = false;
  /* where destination j's header and payload go: its ring slot, or (put path) this warp's staging: the payload
   * once for every put destination, a header each */
  auto head_of = [&](int j) -> char * {
    char *pb = ht_peer(P, dst[j]);
    return pb ? ring_slot(P, pb, me, c, slot[j]) : stage + pay + (size_t)j * po;
  };
  auto body_of = [&](int j) -> char * {
    char *pb = ht_peer(P, dst[j]);
    return pb ? ring_slot(P, pb, me, c, slot[j]) + po : stage;
  };
  for (int j = 0; j < nd; j++) {
    char *m = head_of(j);
    puts |= ht_peer(P, dst[j]) == nullptr;
    const bool here = e >= 0 && e / L == dst[j];
    const unsigned mask = __ballot_sync(0xffffffffu, here);
    if (here) {
      const int i = __popc(mask & ((1u << lane) - 1u));
      ((int4 *)(m + 16))[i] = make_int4(e - dst[j] * L, pos[lane], __float_as_int(w), lane);
    }
    if (lane == 0) *(int4 *)m = make_int4(t, __popc(mask), 0, 0);
  }
  if (P.wire == SY_MOE_WIRE_BF16 || P.wire == SY_MOE_WIRE_FP8_GIVEN) {
    const size_t row = P.wire == SY_MOE_WIRE_BF16 ? (size_t)P.hidden * 2 : (size_t)P.hidden;
    const char *src = (const char *)P.tokens + (size_t)t * row;
    for (size_t off = (size_t)lane * 16; off < row; off += 512) {
      const uint4 v = __ldg((const uint4 *)(src + off));
      for (int j = 0; j < nd; j++) *(uint4 *)(body_of(j) + off) = v;
    }
    if (P.wire == SY_MOE_WIRE_FP8_GIVEN) {
      const int groups = P.hidden / SY_MOE_FP8_GROUP;
      for (int g = lane; g < groups; g += 32) {
        const float s = P.token_scales[(size_t)t * groups + g];
        for (int j = 0; j < nd; j++) ((float *)(body_of(j) + (so - po)))[g] = s;
      }
    }
  } else {
    quantise_token(P, t, nd, body_of);
  }
  if (!puts) return;
  __syncwarp();
  const size_t used =
      P.wire == SY_MOE_WIRE_BF16 ? (size_t)P.hidden * 2 : (so - po) + (size_t)(P.hidden / SY_MOE_FP8_GROUP) * 4;
  for (int j = 0; j < nd; j++) {
    if (ht_peer(P, dst[j])) continue;
    char *remote = ring_slot(P, P.ws, me, c, slot[j]); /* the slot's symmetric address */
    ht_put_warp(remote, stage + pay + (size_t)j * po, po, dst[j]);
    ht_put_warp(remote + po, stage, used, dst[j]);
  }
}

__device__ void send_part(const ht_params &P, int c, char *smem) {
  const int W = P.world_size, C = P.C, me = P.ctx.rank, L = P.L;
  uint64_t *base = (uint64_t *)smem; /* [W] the next index of ring (me -> d, c) */
  __shared__ send_batch B;
  __shared__ int touched[HT_BATCH * 32], ntouched, failed;
  for (int d = threadIdx.x; d < W; d += blockDim.x) base[d] = P.sent[(size_t)d * C + c];
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  const int begin = chan_begin(c, P.num_tokens, C), end = chan_begin(c + 1, P.num_tokens, C);
  const int32_t *ids = hsec(P, P.hl.ids);
  for (int t0 = begin; t0 < end; t0 += HT_BATCH) {
    const int nb = min(HT_BATCH, end - t0);
    if (threadIdx.x == 0) {
      ntouched = 0;
      for (int j = 0; j < nb; j++) {
        int nd = 0;
        for (int k = 0; k < P.K; k++) {
          const int e = ids[(size_t)(t0 + j) * P.K + k];
          if (e < 0) continue;
          const int d = e / L;
          bool seen = false;
          for (int i = 0; i < nd; i++) seen |= B.dst[j][i] == d;
          if (seen) continue;
          B.dst[j][nd] = d;
          B.slot[j][nd++] = base[d]++;
          bool listed = false;
          for (int i = 0; i < ntouched; i++) listed |= touched[i] == d;
          if (!listed) touched[ntouched++] = d;
        }
        B.ndst[j] = nd;
      }
      /* room: index base[d] - 1 must be below head + R */
      for (int i = 0; i < ntouched && !failed; i++) {
        const int d = touched[i];
        if (base[d] > HT_SLOTS && !ht_wait(P, head_word(P, P.ws, d, c), base[d] - HT_SLOTS, OP_MOE_HT_SEND, d))
          failed = 1;
      }
    }
    __syncthreads();
    if (failed) return;
    for (int j = threadIdx.x / 32; j < nb; j += HT_WARPS) send_token(P, c, t0 + j, B.dst[j], B.slot[j], B.ndst[j]);
    __syncthreads();
    if (threadIdx.x == 0) {
      bool remote = false;
      for (int i = 0; i < ntouched; i++) remote |= touched[i] != me;
      fence_acq_rel(remote);
      for (int i = 0; i < ntouched; i++) ht_publish(P, touched[i], c, base[touched[i]]);
    }
    __syncthreads();
  }
  for (int d = threadIdx.x; d < W; d += blockDim.x) P.sent[(size_t)d * C + c] = base[d];
}

/* A warp expands one message from source s into its rows. */
__device__ void recv_message(const ht_params &P, const char *m, int s, const int32_t *rowbase, int32_t *rows_out,
                             bool write) {
  const int lane = threadIdx.x & 31;
  const int4 h = __ldcg((const int4 *)m); /* ring slots are rewritten within a kernel: past L1 */
  const int t = h.x, n = h.y;
  int row = -1;
  float w = 0.0f;
  if (lane < n) {
    const int4 en = __ldcg((const int4 *)(m + 16) + lane);
    row = rowbase[(size_t)s * P.L + en.x] + en.y;
    w = __int_as_float(en.z);
  }
  if (lane < P.kk) rows_out[lane] = lane < n ? row : -1;
  if (!write) return;
  if (lane < n) {
    P.recv.src[(size_t)row * 2] = s;
    P.recv.src[(size_t)row * 2 + 1] = t;
    P.recv.weights[row] = w;
  }
  const bool fp8 = P.wire != SY_MOE_WIRE_BF16;
  const size_t bytes = fp8 ? (size_t)P.hidden : (size_t)P.hidden * 2;
  const char *src = m + P.wl.payload_offset;
  char *dst = (char *)P.recv.tokens;
  /* every lane runs every pass (the shuffles need the whole warp); a lane past the row's end copies nothing */
  for (size_t pass = 0; pass < bytes; pass += 512) {
    const size_t off = pass + (size_t)lane * 16;
    const bool on = off < bytes;
    const uint4 v = on ? __ldcg((const uint4 *)(src + off)) : make_uint4(0, 0, 0, 0);
    for (int i = 0; i < n; i++) {
      const int r = __shfl_sync(0xffffffffu, row, i);
      if (on) *(uint4 *)(dst + (size_t)r * bytes + off) = v;
    }
  }
  if (fp8) {
    const int groups = P.hidden / SY_MOE_FP8_GROUP;
    const float *sc = (const float *)(m + P.wl.scales_offset);
    for (int i = 0; i < n; i++) {
      const int r = __shfl_sync(0xffffffffu, row, i);
      for (int g = lane; g < groups; g += 32) P.recv.scales[(size_t)g * P.recv.rows + r] = __ldcg(sc + g);
    }
  }
}

/* The combine's backward: a warp turns one message (the owner's grad_out row g) into the gradient of each row
 * it reached in the forward dispatch (the handle's recv_rows): bf16(w_r x g) or g, and the 32-lane dot product of
 * g with rows_in[r] (ref/moe_ht_ref.c: sy__moe_ht_scale_row, sy__moe_ht_dot). */
__device__ void recv_grad(const ht_params &P, const char *m, const int32_t *rows) {
  const int lane = threadIdx.x & 31;
  const int row = lane < P.kk ? rows[lane] : -1;
  const int n = __popc(__ballot_sync(0xffffffffu, row >= 0));
  const float w = row >= 0 && P.row_weights ? P.row_weights[row] : 1.0f;
  const size_t bytes = (size_t)P.hidden * 2;
  const char *g = m + P.wl.payload_offset;
  char *out = (char *)P.out;
  for (size_t pass = 0; pass < bytes; pass += 512) { /* every lane every pass, as in recv_message */
    const size_t off = pass + (size_t)lane * 16;
    const bool on = off < bytes;
    const uint4 v = on ? __ldcg((const uint4 *)(g + off)) : make_uint4(0, 0, 0, 0);
    const uint32_t in[4] = {v.x, v.y, v.z, v.w};
    for (int i = 0; i < n; i++) {
      const int r = __shfl_sync(0xffffffffu, row, i);
      const float wr = __shfl_sync(0xffffffffu, w, i);
      if (!on) continue;
      uint4 o = v;
      if (P.row_weights) {
        uint32_t q[4];
        for (int j = 0; j < 4; j++)
          q[j] = (uint32_t)sy__float_to_bf16(wr * sy__bf16_to_float((uint16_t)(in[j] & 0xffff))) |
                 ((uint32_t)sy__float_to_bf16(wr * sy__bf16_to_float((uint16_t)(in[j] >> 16))) << 16);
        o = make_uint4(q[0], q[1], q[2], q[3]);
      }
      *(uint4 *)(out + (size_t)r * bytes + off) = o;
    }
  }
  if (!P.grad_row_weights) return;
  const uint16_t *gh = (const uint16_t *)g;
  for (int i = 0; i < n; i++) {
    const int r = __shfl_sync(0xffffffffu, row, i);
    const uint16_t *y = (const uint16_t *)P.rows_in + (size_t)r * P.hidden;
    float acc = 0.0f;
    for (int h = lane; h < P.hidden; h += 32)
      acc = fmaf(sy__bf16_to_float(__ldcg(gh + h)), sy__bf16_to_float(y[h]), acc);
    for (int d = 16; d >= 1; d >>= 1) acc = acc + __shfl_xor_sync(0xffffffffu, acc, d);
    if (lane == 0) P.grad_row_weights[r] = acc;
  }
}

/* The combine's backward: grad_row_weights of the padding rows of the experts block c owns, 0. */
__device__ void grad_padding(const ht_params &P, int c) {
  if (!P.grad_row_weights) return;
  const int32_t *counts = hsec(P, P.hl.recv_counts), *offsets = hsec(P, P.hl.offsets);
  const int stride = P.recv.expert_stride;
  for (int e = c; e < P.L; e += P.C) {
    int64_t n = 0;
    for (int s = 0; s < P.world_size; s++) n += counts[(size_t)s * P.L + e];
    const int64_t first = (stride ? (int64_t)e * stride : offsets[e]) + n;
    const int64_t end = stride ? (int64_t)(e + 1) * stride : offsets[e + 1];
    for (int64_t r = first + threadIdx.x; r < end; r += blockDim.x) P.grad_row_weights[r] = 0.0f;
  }
}

/* Offsets of this call's layout (contiguous from the handle, or the masked stride), the rows check, and the
 * padding rows of the experts this block owns. Returns whether rows may be written. */
__device__ bool recv_setup(const ht_params &P, int c, int32_t *rowbase) {
  const int W = P.world_size, L = P.L;
  const int32_t *counts = hsec(P, P.hl.recv_counts), *offsets = hsec(P, P.hl.offsets);
  const int stride = P.recv.expert_stride;
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (int e = threadIdx.x; e < L; e += blockDim.x) {
    int64_t at = stride ? (int64_t)e * stride : offsets[e], n = 0;
    for (int s = 0; s < W; s++) {
      rowbase[(size_t)s * L + e] = (int32_t)(at + n);
      n += counts[(size_t)s * L + e];
    }
    const int64_t end = stride ? (int64_t)(e + 1) * stride : offsets[e + 1];
    if ((stride && n > stride) || end > P.recv.rows) {
      bad = 1;
      if (c == 0)
        report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_HT_ROWS, stride && n > stride ? e : -1, 0,
                     stride && n > stride ? (uint64_t)stride : (uint64_t)P.recv.rows,
                     stride && n > stride ? (uint64_t)n : (uint64_t)end);
    }
  }
  __syncthreads();
  if (bad) return false;
  for (int e = c; e < L; e += P.C) { /* padding rows: src {-1, -1}, weight 0 */
    int64_t n = 0;
    for (int s = 0; s < W; s++) n += counts[(size_t)s * L + e];
    const int64_t first = (stride ? (int64_t)e * stride : offsets[e]) + n;
    const int64_t end = stride ? (int64_t)(e + 1) * stride : offsets[e + 1];
    for (int64_t r = first + threadIdx.x; r < end; r += blockDim.x) {
      P.recv.src[r * 2] = -1;
      P.recv.src[r * 2 + 1] = -1;
      P.recv.weights[r] = 0.0f;
    }
  }
  if (c == 0) {
    for (int e = threadIdx.x; e <= L; e += blockDim.x) P.recv.expert_offsets[e] = stride ? e * stride : offsets[e];
    for (int e = threadIdx.x; e < L; e += blockDim.x) {
      int32_t n = 0;
      for (int s = 0; s < W; s++) n += counts[(size_t)s * L + e];
      P.recv.expert_counts[e] = n;
    }
  }
  return true;
}

__device__ void recv_part(const ht_params &P, int c, char *smem) {
  const int W = P.world_size, C = P.C;
  uint64_t *cons = (uint64_t *)smem;     /* [W] */
  int32_t *left = (int32_t *)(cons + W); /* [W] messages of this call still to come */
  int32_t *done = left + W;              /* [W] messages taken in this call */
  int32_t *mbase = done + W;             /* [W] the first message index of this channel at s */
  int32_t *rowbase = mbase + W;          /* [W][L] */
  const int32_t *chan = hsec(P, P.hl.chan_tokens);
  for (int s = threadIdx.x; s < W; s += blockDim.x) {
    cons[s] = P.consumed[(size_t)s * C + c];
    left[s] = chan[(size_t)s * C + c];
    done[s] = 0;
    int b = 0;
    for (int j = 0; j < c; j++) b += chan[(size_t)s * C + j];
    mbase[s] = b;
  }
  const bool write = P.mode == HT_DISPATCH ? recv_setup(P, c, rowbase) : true;
  if (P.mode == HT_COMBINE_BACKWARD) grad_padding(P, c);
  __shared__ int nb, pending, stalled;
  __shared__ uint64_t since;
  int32_t *recv_rows = hsec(P, P.hl.recv_rows);
  if (threadIdx.x == 0) stalled = 0, since = 0;
  for (;;) {
    __syncthreads();
    if (threadIdx.x == 0) {
      pending = 0;
      for (int s = 0; s < W; s++) pending += left[s];
    }
    __syncthreads();
    if (pending == 0 || stalled) break;
    bool progress = false;
    for (int s = 0; s < W; s++) {
      if (left[s] == 0) continue; /* uniform: left[] changes only between barriers */
      if (threadIdx.x == 0) {
        const uint64_t avail = ld_acquire_sys(tail_word(P, P.ws, s, c)) - cons[s];
        nb = (int)min((uint64_t)min(left[s], HT_BATCH), avail);
      }
      __syncthreads();
      const int n = nb;
      __syncthreads(); /* every thread has read nb before thread 0 writes the next source's */
      if (n == 0) continue;
      progress = true;
      for (int j = threadIdx.x / 32; j < n; j += HT_WARPS) {
        const char *m = ring_slot(P, P.ws, s, c, cons[s] + j);
        int32_t *rows = recv_rows + (((size_t)s * P.T) + mbase[s] + done[s] + j) * P.kk;
        if (P.mode == HT_DISPATCH) recv_message(P, m, s, rowbase, rows, write);
        else recv_grad(P, m, rows);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        cons[s] += n;
        left[s] -= n;
        done[s] += n;
        ht_give_back(P, s, c, cons[s]);
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) { /* bounded: no message from any pending source for the timeout */
      const uint64_t now = global_timer_ns();
      if (progress || since == 0) since = now;
      else if (aborted(P.ctx)) stalled = 1;
      else if (now - since > P.ctx.timeout_ns) {
        int s = 0;
        while (s < W && left[s] == 0) s++;
        report_error(P.ctx, SY_ERR_TIMEOUT, OP_MOE_HT_RECV, s, 0, cons[s] + 1,
                     ld_acquire_sys(tail_word(P, P.ws, s, c)));
        stalled = 1;
      }
    }
  }
  __syncthreads();
  for (int s = threadIdx.x; s < W; s += blockDim.x) P.consumed[(size_t)s * C + c] = cons[s];
}

} // namespace

__device__ bool sy::ht_handle_ok(const ht_params &P, bool dispatched) {
  const sy_moe_ht_handle_header_t *h = (const sy_moe_ht_handle_header_t *)P.handle;
  const bool mine = h->magic == SY_MOE_HT_HANDLE_MAGIC && h->object == P.object;
  const bool ok = mine && h->num_tokens == P.num_tokens;
  /* the combines read the rows the handle's dispatch recorded, in that dispatch's layout */
  const bool rows = !dispatched || (h->dispatched != 0 && h->expert_stride == P.recv.expert_stride);
  if ((!ok || !rows) && blockIdx.x == 0 && threadIdx.x == 0) {
    if (!ok)
      report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_HT_HANDLE, -1, 0, mine ? (uint64_t)h->num_tokens : h->object,
                   mine ? (uint64_t)P.num_tokens : P.object);
    else
      report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_HT_NOT_DISPATCHED, h->dispatched, 0, (uint64_t)h->expert_stride,
                   (uint64_t)P.recv.expert_stride);
  }
  return ok && rows;
}

__global__ void __launch_bounds__(HT_THREADS) sy_ht_dispatch(ht_params P) {
  pdl_begin();
  extern __shared__ __align__(16) char smem[];
  if (!ht_handle_ok(P, P.mode == HT_COMBINE_BACKWARD)) return;
  if ((int)blockIdx.x < P.C) send_part(P, blockIdx.x, smem);
  else recv_part(P, blockIdx.x - P.C, smem);
  if (P.mode == HT_DISPATCH && blockIdx.x == (unsigned)P.C && threadIdx.x == 0) { /* for the combines' check */
    sy_moe_ht_handle_header_t *h = (sy_moe_ht_handle_header_t *)P.handle;
    h->expert_stride = P.recv.expert_stride;
    h->dispatched = 1;
  }
}
