/*
 * combine.cu — sy_moe_ht_combine on the GPU: one kernel, the dispatch's rings run backwards, each channel c's two
 * roles by blocks (2 C blocks of 16 warps: block c the experts' side, block C + c the owner) or by warps
 * (SY_HT_ROLES: C blocks whose first SY_HT_EXPERT_WARPS warps are channel c's experts' side, the others its owner;
 * ht.cuh). Below, "block" means a role's warps.
 *   send (0)        the experts' side: block c answers, for every other source s, the messages it
 *                   received from s on channel c, in their order: a warp per message adds w_r x y_r over the
 *                   message's rows (recv_rows: ascending k) with fused multiply-adds from +0, rounds to bf16 and
 *                   writes the partial, with each row's value (row_values), into ring (me -> s, c). Sources are
 *                   served round robin and a full ring is skipped, not waited for, so no ring's owner waits on a
 *                   block that waits on another owner. Then it sums the channel's second-half tokens whose
 *                   experts are all here (their partial made here, rows.cuh: chan_mid).
 *   receive (1)     the owner: block C + c walks channel c's tokens in order, HT_BATCH at a time; warp
 *                   0 finds each token's ranks (ascending, a lane a token) and their message indices in each
 *                   other rank's ring (a pass per rank, plan_batch), and waits (bounded) for them; a warp per token adds the partials in
 *                   ascending rank order from +0 in fp32 (this rank's partial made from its rows, in the same
 *                   rounding) and rounds once, and puts the row values back at their (token, k).
 * With a call's SM budget below config.num_sms (sy_moe_ht_set_num_sms) a role's block serves channels c, c + B, ...
 * in turn (B the call's channels; ht.cuh: role_chan): read "block c" as the block serving channel c.
 */
#include "cuda/moe_ht/pipe.cuh"
#include "cuda/moe_ht/rows.cuh"

using namespace sy;

namespace {

__device__ __forceinline__ void bf16x8_to_float(uint4 v, float *x) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  for (int i = 0; i < 4; i++) {
    x[2 * i] = bf16_lo(w[i]);
    x[2 * i + 1] = bf16_hi(w[i]);
  }
}

__device__ __forceinline__ uint4 float8_to_bf16(const float *x) {
  return make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]), pack_bf16(x[6], x[7]));
}

/* A warp: the partial of one received message into m: its ring slot at the owner, or (put path) this warp's
 * staging, put to the slot's symmetric address `remote` at owner s afterwards. The rows through the warp's pipe:
 * acc += w_i x y_i over the rows in lane order (recv_rows: ascending k), fused multiply-adds from +0, rounded to
 * bf16 once. */
__device__ void send_partial(const ht_params &P, ht_pipe &pp, char *m, int index, const int32_t *rows, char *remote,
                             int s, bool rows_ok) {
  const int lane = threadIdx.x & 31;
  const int row = rows_ok && lane < P.kk ? rows[lane] : -1; /* rows that do not fit: an empty partial */
  const int n = __popc(__ballot_sync(0xffffffffu, row >= 0));
  const size_t bytes = (size_t)P.hidden * 2;
  if (lane < n) {
    const float v = P.row_values ? P.row_values[row] : 0.0f;
    ((int4 *)(m + 16))[lane] = make_int4(__float_as_int(v), 0, 0, 0);
    pp.src[lane] = ht_src{(const char *)P.tokens + (size_t)row * bytes, P.row_weights ? P.row_weights[row] : 1.0f};
  }
  if (lane == 0) *(int4 *)m = make_int4(index, n, 0, 0);
  __syncwarp();
  constexpr int V = HT_PIPE_VEC;
  float acc[V][8];
#pragma unroll
  for (int h = 0; h < V; h++)
#pragma unroll
    for (int q = 0; q < 8; q++) acc[h][q] = 0.0f;
  char *out = m + P.wl.payload_offset;
  pipe_gather(
      pp, n, bytes,
      [&](int, int i, const uint4 *v) {
        const float w = pp.src[i].w;
#pragma unroll
        for (int h = 0; h < V; h++) {
          float y[8];
          bf16x8_to_float(v[h], y);
#pragma unroll
          for (int q = 0; q < 8; q++) acc[h][q] = fmaf(w, y[q], acc[h][q]);
        }
      },
      [&](int off) {
#pragma unroll
        for (int h = 0; h < V; h++) {
          if (off + 512 * h < (int)bytes) *(uint4 *)(out + off + 512 * h) = float8_to_bf16(acc[h]);
#pragma unroll
          for (int q = 0; q < 8; q++) acc[h][q] = 0.0f;
        }
      });
  __syncwarp(); /* the table is read until here; the partial is whole before the put */
  if (!remote) return;
  ht_put_warp(remote, m, P.wl.payload_offset + bytes, s);
}

/* A warp: token t's row, the sum over its nr ranks' partials in rank order from +0 in fp32 (P.add: then the row of
 * out as it was, a token of no rank left as it is: sy_moe_ht_combine_add), rounded once; this
 * rank's partial (has_me) made here from its ns rows (lane i < ns: srow, sw) as a ring's would be (fused
 * multiply-adds in row order, rounded to bf16). Through the warp's pipe: the table holds the other ranks' slots
 * (lane i < nr: slot, NULL for this rank) in rank order with this rank's rows in this rank's place, so its partial
 * is rounded and added when its last row has been read. A partial of no rows (rows that do not fit) is +0 and is
 * not added: acc, a sum from +0, is never -0, so acc + +0 == acc bit for bit. */
__device__ __forceinline__ void reduce_rows(const ht_params &P, ht_pipe &pp, int t, const int *rank, int nr,
                                            const char *slot, int srow, float sw, int ns, bool has_me) {
  const int me = P.ctx.rank, lane = threadIdx.x & 31;
  const size_t bytes = (size_t)P.hidden * 2;
  if (P.add && nr == 0) return;
  int lo = 0; /* the table's first row of this rank: after the ranks below it */
  for (int j = 0; j < nr; j++) lo += rank[j] < me;
  if (!has_me) ns = 0;
  if (lane < ns) pp.src[lo + lane] = ht_src{(const char *)P.tokens + (size_t)srow * bytes, sw};
  if (lane < nr && rank[lane] != me) pp.src[rank[lane] < me ? lane : lane - (has_me ? 1 : 0) + ns] = ht_src{slot, 0.0f};
  const int n = ns + nr - (has_me ? 1 : 0) + (P.add ? 1 : 0); /* at most top_k + 1 <= 32 (add: top_k <= 31) */
  char *out = (char *)P.out + (size_t)t * bytes;
  if (P.add && lane == 0) pp.src[n - 1] = ht_src{out, 0.0f}; /* out's row, added last as a rank's partial is */
  __syncwarp();
  constexpr int V = HT_PIPE_VEC;
  float acc[V][8], mine[V][8];
#pragma unroll
  for (int h = 0; h < V; h++)
#pragma unroll
    for (int q = 0; q < 8; q++) acc[h][q] = mine[h][q] = 0.0f;
  pipe_gather(
      pp, n, bytes,
      [&](int, int i, const uint4 *v) {
        if ((unsigned)(i - lo) < (unsigned)ns) {
          const float w = pp.src[i].w;
#pragma unroll
          for (int h = 0; h < V; h++) {
            float y[8];
            bf16x8_to_float(v[h], y);
#pragma unroll
            for (int q = 0; q < 8; q++) mine[h][q] = fmaf(w, y[q], mine[h][q]);
          }
          if (i == lo + ns - 1)
#pragma unroll
            for (int h = 0; h < V; h++) {
              bf16x8_to_float(float8_to_bf16(mine[h]), mine[h]); /* rounded as a ring's partial */
#pragma unroll
              for (int q = 0; q < 8; q++) acc[h][q] = acc[h][q] + mine[h][q];
            }
          return;
        }
#pragma unroll
        for (int h = 0; h < V; h++) {
          float y[8];
          bf16x8_to_float(v[h], y);
#pragma unroll
          for (int q = 0; q < 8; q++) acc[h][q] = acc[h][q] + y[q];
        }
      },
      [&](int off) {
#pragma unroll
        for (int h = 0; h < V; h++) {
          if (off + 512 * h < (int)bytes) *(uint4 *)(out + off + 512 * h) = float8_to_bf16(acc[h]);
#pragma unroll
          for (int q = 0; q < 8; q++) acc[h][q] = mine[h][q] = 0.0f;
        }
      });
  __syncwarp(); /* the table is read until here */
}

/* A warp: token t's sum over its nr ranks' partials (rank[] ascending; index[]: the message's index in each
 * other rank's ring (me excluded): this rank's partial is made here from its rows), and its row values back to
 * their k. */
__device__ __forceinline__ void reduce_token(const ht_params &P, ht_pipe &pp, int c, int t, const int *rank,
                                             const uint64_t *index, int nr, const int32_t *rowbase_me, bool rows_ok) {
  const int lane = threadIdx.x & 31, me = P.ctx.rank;
  bool has_me = false;
  for (int i = 0; i < nr; i++) has_me |= rank[i] == me;
  int srow = -1, sk = -1, ns = 0;
  if (has_me && rows_ok) ns = self_rows(P, rowbase_me, t, srow, sk);
  const float sw = srow >= 0 && P.row_weights ? P.row_weights[srow] : 1.0f;
  const char *slot =
      lane < nr && rank[lane] != me ? ring_slot(P, P.ws, rank[lane], c, index[lane]) + P.wl.payload_offset : nullptr;
  reduce_rows(P, pp, t, rank, nr, slot, srow, sw, ns, has_me);
  if (!P.token_values || lane >= P.K) return;
  const int32_t *ids = hsec(P, P.hl.ids) + (size_t)t * P.K;
  const int e = ids[lane];
  float v = 0.0f;
  if (e >= 0 && e / P.L == me) {
    const int32_t *pos = hsec(P, P.hl.pos) + (size_t)t * P.K;
    if (P.row_values && rows_ok) v = P.row_values[rowbase_me[e - me * P.L] + pos[lane]];
  } else if (e >= 0) {
    const int p = e / P.L;
    int before = 0; /* the entry's place among t's entries on rank p, in k order */
    for (int k = 0; k < lane; k++) before += ids[k] >= 0 && ids[k] / P.L == p;
    for (int i = 0; i < nr; i++)
      if (rank[i] == p) v = __int_as_float(__ldcg((const int4 *)(ring_slot(P, P.ws, p, c, index[i]) + 16) + before).x);
  }
  P.token_values[(size_t)t * P.K + lane] = v;
}

template <bool RM>
__device__ void send_part(const ht_params &P, ht_pipe &pp, int c, char *smem, const int32_t *rowbase_me, bool rows_ok) {
  const int W = P.world_size, C = P.C, me = P.ctx.rank;
  uint64_t *base = (uint64_t *)smem;     /* [W] */
  int32_t *left = (int32_t *)(base + W); /* [W] */
  int32_t *done = left + W, *mbase = done + W;
  const int32_t *chan = hsec(P, P.hl.chan_tokens), *recv_rows = hsec(P, P.hl.recv_rows);
  for (int s = role_tid<RM>(P); s < W; s += role_threads<RM>(P)) {
    base[s] = P.sent[(size_t)s * C + c];
    left[s] = s == me ? 0 : chan[(size_t)s * C + c]; /* this rank's own tokens take no ring */
    done[s] = 0;
    int b = 0;
    for (int j = 0; j < c; j++) b += chan[(size_t)s * C + j];
    mbase[s] = b;
  }
  int32_t *take = mbase + W; /* [W] messages this round answers for each source */
  const bool stalled = serve_rounds<RM>(
      P, left, take, []() { return false; },
      [&](int s) { /* the room in owner s's ring */
                   const uint64_t room = ld_acquire_sys(head_word(P, P.ws, s, c)) + HT_SLOTS - base[s];
                   return (int)min((uint64_t)min(left[s], HT_PER_PEER), room);
      },
      [&](int s, int j) {
        char *peer = ht_peer(P, s);
        const int index = mbase[s] + done[s] + j;
        char *slot = ring_slot(P, peer ? peer : P.ws, me, c, base[s] + j);
        send_partial(P, pp, peer ? slot : ht_stage(P), index, recv_rows + ((size_t)s * P.T + index) * P.kk,
                     peer ? nullptr : slot, s, rows_ok);
      },
      [&](int s, int k) { /* the partials are written (the fence here where the publish follows at once: the
                             order measured) */
                          if (!SY_HT_SETTLE_AHEAD && ht_peer(P, s)) fence_acq_rel(s != me);
                          base[s] += k;
                          left[s] -= k;
                          done[s] += k;
      },
      [&](int s) { /* publish them */
                   if (SY_HT_SETTLE_AHEAD && ht_peer(P, s)) fence_acq_rel(s != me);
                   ht_publish(P, s, c, base[s]);
      },
      [&](int s) {
        report_error(P.ctx, SY_ERR_TIMEOUT, OP_MOE_HT_SEND, s, 0, base[s] + 1 - HT_SLOTS,
                     ld_acquire_sys(head_word(P, P.ws, s, c)));
      });
  for (int s = role_tid<RM>(P); s < W; s += role_threads<RM>(P)) P.sent[(size_t)s * C + c] = base[s];
  /* the channel's second-half tokens whose experts are all here: their whole sum */
  const int only[1] = {me};
  const uint64_t none[1] = {0};
  const uint64_t pt = probe_now(P);
  for (int t = chan_mid(c, P.num_tokens, C) + role_warp<RM>(P); !stalled && t < chan_begin(c + 1, P.num_tokens, C);
       t += role_nwarps<RM>(P))
    if (self_only(P, t)) reduce_token(P, pp, c, t, only, none, 1, rowbase_me, rows_ok);
  if (P.probe) {
    role_sync<RM>(P);
    probe_add<RM>(P, PR_OWN, probe_now(P) - pt);
  }
}

struct recv_batch {
  int nr[HT_BATCH];
  int skip[HT_BATCH];
  int rank[HT_BATCH][33]; /* a token's ranks (33: the lanes' rows in different banks) */
  uint64_t index[HT_BATCH][32];
};

/* Warp 0: the batch's tokens' ranks, ascending (a lane a token), and which tokens the sending block sums (the
 * second half's tokens with every expert here); then each (token, other rank) its message's index in that rank's
 * ring, in token order, and the ranks touched listed. By lanes, with no shared-memory read in a chain: one after
 * another (thread 0 giving every index in turn, each lane inserting its ranks in shared memory) they held the
 * owners' batches at world 1, where 15 warps' pipes fill the SM's memory queue (run 50). */
template <bool RM>
__device__ void plan_batch(const ht_params &P, int t0, int nb, int mid, uint64_t *cons, recv_batch &B, int *touched,
                           int &ntouched) {
  const int lane = threadIdx.x & 31, me = P.ctx.rank;
  if (role_warp<RM>(P) != 0) return;
  if (lane < nb) {
    const int32_t *ids = hsec(P, P.hl.ids) + (size_t)(t0 + lane) * P.K;
    int nr = 0;
    uint64_t seen = 0; /* up to 64 ranks: the token's ranks as bits, so no shared-memory read is in the chain */
    const bool bits = P.world_size <= 64;
    for (int k0 = 0; k0 < P.K; k0 += 8) {
      int ev[8]; /* the loads in flight together (one after another they held the owners' batches: run 50) */
#pragma unroll
      for (int u = 0; u < 8; u++) ev[u] = k0 + u < P.K ? __ldg(ids + k0 + u) : -1;
#pragma unroll
      for (int u = 0; u < 8; u++) {
        const int e = ev[u];
        if (e < 0) continue;
        const int p = e / P.L;
        if (bits) {
          seen |= 1ull << p;
          continue;
        }
        int at = 0; /* insertion, distinct */
        while (at < nr && B.rank[lane][at] < p) at++;
        if (at < nr && B.rank[lane][at] == p) continue;
        for (int i = nr; i > at; i--) B.rank[lane][i] = B.rank[lane][i - 1];
        B.rank[lane][at] = p;
        nr++;
      }
    }
    for (; seen; seen &= seen - 1) B.rank[lane][nr++] = __ffsll((long long)seen) - 1; /* ascending */
    B.nr[lane] = nr;
    B.skip[lane] = t0 + lane >= mid && nr == 1 && B.rank[lane][0] == me;
  }
  /* each (token, other rank) its message's index, a pass per rank the batch touches, lowest first (which lists
   * them: touched, ascending): the lanes of the tokens that name it, in token order, take cons[d] onward */
  const bool act = lane < nb && !B.skip[lane];
  const int nr = act ? B.nr[lane] : 0;
  int nt = 0;
  for (int last = -1;;) {
    int mine = INT_MAX; /* this lane's lowest other rank above the last pass's */
    for (int i = 0; i < nr; i++) {
      const int d = B.rank[lane][i];
      if (d != me && d > last && d < mine) mine = d;
    }
    const int d = __reduce_min_sync(0xffffffffu, mine);
    if (d == INT_MAX) break;
    int at = -1;
    for (int i = 0; i < nr; i++)
      if (B.rank[lane][i] == d) at = i;
    const unsigned has = __ballot_sync(0xffffffffu, at >= 0);
    if (at >= 0) B.index[lane][at] = cons[d] + __popc(has & ((1u << lane) - 1u));
    __syncwarp(); /* cons[d] is read */
    if (lane == 0) cons[d] += __popc(has), touched[nt] = d;
    nt++;
    last = d;
  }
  if (lane == 0) ntouched = nt;
  __syncwarp();
}

/* The owners' side of a channel: batches of HT_BATCH tokens in order, each planned (plan_batch: which ranks'
 * partials a token has and their messages' indices), waited for (the tails of the ranks the batch touches), summed
 * (reduce_token, a token a warp) and handed back (the heads). Two schedules with the same sums and bits, one in
 * each instance of the kernel (sy_ht_combine, sy_ht_combine_ahead; SY_HT_OWNER_AHEAD):
 * - recv_lockstep: plan, wait, sum, hand back, a block barrier between each step;
 * - recv_ahead: warp 0 plans batch s + 1 and waits for its partials while the other warps sum batch s, then joins
 *   them (tokens to warps by a counter in shared memory).
 * Measured (run 37, 2 x H200, BF16, 4,096 tokens; bench/NOTES.md): ahead, the default, took the combine at world 2
 * with 16 SMs from 1,039 to 805-812 us, and at world 1 with 132 SMs from 139.5-139.9 to 135.0-135.1 (with the
 * pipes aligned: pipe.cuh). The lockstep instance stays for measuring (SY_HT_OWNER_AHEAD=0). A run-time switch in
 * one kernel instead (128 registers against 116) was slower at world 1.
 *
 * recv_ahead, step s: warp 0 plans batch s into buffer s % 2 (thread 0 gives each message its index, so cons[] runs
 * to the end of batch s, and keeps those values in snap[s % 2]) and waits for its partials, while warps 1..15 sum
 * batch s - 1 from buffer (s - 1) % 2, tokens by the counter ctr[s % 2]; warp 0 joins them when its wait is over.
 * After the step's barrier thread 0 hands back batch s - 1 (snap[(s - 1) % 2]: the values at its planning's end,
 * not cons, which has moved on to batch s). A ring holds both batches' messages from a peer (HT_SLOTS >= 2
 * HT_BATCH), so the sender can write batch s's while batch s - 1's are unreturned. Dynamic shared memory: cons [W],
 * snap [2][W] uint64 (the 24 W bytes of per-peer state). */
static_assert(HT_SLOTS >= 2 * HT_BATCH, "recv_ahead: a ring holds two batches' messages from one peer");
template <bool RM>
__device__ void recv_ahead(const ht_params &P, ht_pipe &pp, int c, char *smem, const int32_t *rowbase_me,
                           bool rows_ok) {
  const int W = P.world_size, C = P.C, warp = role_warp<RM>(P), lane = threadIdx.x & 31;
  uint64_t *cons = (uint64_t *)smem; /* [W] */
  uint64_t *snap = cons + W;         /* [2][W] */
  __shared__ recv_batch B[2];
  __shared__ int touched[2][HT_BATCH * 32], ntouched[2], ctr[2];
  int failed = 0; /* thread 0's wait timed out (warp 0 learns it by a shuffle, the block by the step's barrier) */
  for (int p = role_tid<RM>(P); p < W; p += role_threads<RM>(P)) cons[p] = P.consumed[(size_t)p * C + c];
  if (role_tid<RM>(P) == 0) ctr[0] = ctr[1] = 0, ntouched[0] = ntouched[1] = 0;
  role_sync<RM>(P);
  const int begin = chan_begin(c, P.num_tokens, C), end = chan_begin(c + 1, P.num_tokens, C);
  const int mid = chan_mid(c, P.num_tokens, C), nbatch = (end - begin + HT_BATCH - 1) / HT_BATCH;
  for (int step = 0; step <= nbatch; step++) {
    uint64_t pt = probe_now(P);
    const int cur = step & 1, prev = cur ^ 1;
    auto sum = [&](int b) { /* batch b (buffer b & 1) by the counter ctr[cur] */
                            const int t0 = begin + b * HT_BATCH, nb = min(HT_BATCH, end - t0);
                            recv_batch &R = B[b & 1];
                            for (;;) {
                              int j = 0;
                              if (lane == 0) j = atomicAdd(&ctr[cur], 1);
                              j = __shfl_sync(0xffffffffu, j, 0);
                              if (j >= nb) break;
                              if (!R.skip[j])
                                reduce_token(P, pp, c, t0 + j, R.rank[j], R.index[j], R.nr[j], rowbase_me, rows_ok);
                            }
    };
    if (warp == 0) {
      if (role_tid<RM>(P) == 0) ctr[prev] = 0; /* last used in step - 1; next in step + 1, after this step's barrier */
      if (step < nbatch) {
        const int t0 = begin + step * HT_BATCH, nb = min(HT_BATCH, end - t0);
        plan_batch<RM>(P, t0, nb, mid, cons, B[cur], touched[cur], ntouched[cur]);
        if (role_tid<RM>(P) == 0) {
          for (int q = 0; q < ntouched[cur]; q++) snap[cur * W + touched[cur][q]] = cons[touched[cur][q]];
          for (int q = 0; q < ntouched[cur] && !failed; q++) {
            const int p = touched[cur][q];
            if (!ht_wait(P, tail_word(P, P.ws, p, c), cons[p], OP_MOE_HT_RECV, p)) failed = 1;
          }
        }
        failed = __shfl_sync(0xffffffffu, failed, 0);
        if (P.probe) {
          probe_add<RM>(P, PR_WAIT, probe_now(P) - pt), pt = probe_now(P);
          probe_add<RM>(P, PR_ITEMS, nb);
        }
      }
    }
    if (step > 0 && !failed) sum(step - 1);
    if (role_sync_or<RM>(P, failed)) return;
    if (P.probe) {
      probe_add<RM>(P, PR_WORK, probe_now(P) - pt), pt = probe_now(P);
      if (step > 0) probe_add<RM>(P, PR_ROUNDS, 1);
    }
    if (step > 0 && role_tid<RM>(P) == 0) { /* batch step - 1 is read: its heads back */
      bool stores = false;
      for (int q = 0; SY_HT_HEAD_ORDER == 1 && q < ntouched[prev]; q++) stores = stores || ht_peer(P, touched[prev][q]);
      if (stores) fence_acq_rel(true);
      for (int q = 0; q < ntouched[prev]; q++) {
        const int p = touched[prev][q];
        ht_give_back(P, p, c, snap[prev * W + p], true);
      }
      if (P.probe) probe_add<RM>(P, PR_SYNC, probe_now(P) - pt);
    }
  }
  role_sync<RM>(P);
  for (int p = role_tid<RM>(P); p < W; p += role_threads<RM>(P)) P.consumed[(size_t)p * C + c] = cons[p];
}

template <bool RM>
__device__ void recv_lockstep(const ht_params &P, ht_pipe &pp, int c, char *smem, const int32_t *rowbase_me,
                              bool rows_ok) {
  const int W = P.world_size, C = P.C;
  uint64_t *cons = (uint64_t *)smem; /* [W] */
  __shared__ recv_batch B;
  __shared__ int touched[HT_BATCH * 32], ntouched, failed;
  for (int p = role_tid<RM>(P); p < W; p += role_threads<RM>(P)) cons[p] = P.consumed[(size_t)p * C + c];
  if (role_tid<RM>(P) == 0) failed = 0;
  role_sync<RM>(P);
  const int end = chan_begin(c + 1, P.num_tokens, C), mid = chan_mid(c, P.num_tokens, C);
  for (int t0 = chan_begin(c, P.num_tokens, C); t0 < end; t0 += HT_BATCH) {
    const int nb = min(HT_BATCH, end - t0);
    uint64_t pt = probe_now(P);
    plan_batch<RM>(P, t0, nb, mid, cons, B, touched, ntouched);
    if (role_tid<RM>(P) == 0)
      for (int q = 0; q < ntouched && !failed; q++) {
        const int p = touched[q];
        if (!ht_wait(P, tail_word(P, P.ws, p, c), cons[p], OP_MOE_HT_RECV, p)) failed = 1;
      }
    role_sync<RM>(P);
    if (failed) return;
    if (P.probe) probe_add<RM>(P, PR_WAIT, probe_now(P) - pt), pt = probe_now(P);
    for (int j = role_warp<RM>(P); j < nb; j += role_nwarps<RM>(P))
      if (!B.skip[j]) reduce_token(P, pp, c, t0 + j, B.rank[j], B.index[j], B.nr[j], rowbase_me, rows_ok);
    role_sync<RM>(P);
    if (P.probe) {
      probe_add<RM>(P, PR_WORK, probe_now(P) - pt), pt = probe_now(P);
      probe_add<RM>(P, PR_ROUNDS, 1);
      probe_add<RM>(P, PR_ITEMS, nb);
    }
    if (role_tid<RM>(P) == 0) {
      bool stores = false; /* one fence for every head stored (the put path's peers are quieted instead) */
      for (int q = 0; SY_HT_HEAD_ORDER == 1 && q < ntouched; q++) stores = stores || ht_peer(P, touched[q]);
      if (stores) fence_acq_rel(true);
      for (int q = 0; q < ntouched; q++) {
        const int p = touched[q];
        ht_give_back(P, p, c, cons[p], true);
      }
    }
    role_sync<RM>(P);
    if (P.probe) probe_add<RM>(P, PR_SYNC, probe_now(P) - pt);
  }
  for (int p = role_tid<RM>(P); p < W; p += role_threads<RM>(P)) P.consumed[(size_t)p * C + c] = cons[p];
}

/* Shared memory: [W] uint64 and 4 [W] int32 of per-peer state, then rowbase [W][L], then a pipe a warp
 * (pipe.cuh: ht_pipes_at). The kernel in two instances: AHEAD, the owners' batches planned ahead (recv_ahead), or
 * not (recv_lockstep). */
template <bool AHEAD, bool RM>
__device__ __forceinline__ void combine_kernel(const ht_params &P, char *smem) {
  pdl_wait();
  if (!ht_handle_ok(P, true)) return;
  int32_t *rowbase = (int32_t *)(smem + (size_t)P.world_size * 24);
  const bool rows_ok = rows_setup(P, rowbase);
  const int32_t *rowbase_me = rowbase + (size_t)P.ctx.rank * P.L;
  ht_pipe &pp = ht_warp_pipe(P.world_size, P.E);
  probe_begin<RM>(P);
  /* from here on each role by itself (role_sync, never __syncthreads); by warps, role 0's per-peer state apart */
  for (int c = role_chan<RM>(P); c < P.C; c += P.B) { /* its channels in turn (P.B < P.C: a call's smaller budget) */
    if (role_of<RM>(P) == 0) send_part<RM>(P, pp, c, RM ? smem + P.role_state : smem, rowbase_me, rows_ok);
    else if (AHEAD) recv_ahead<RM>(P, pp, c, smem, rowbase_me, rows_ok);
    else recv_lockstep<RM>(P, pp, c, smem, rowbase_me, rows_ok);
    role_sync<RM>(P); /* the channel's per-peer state is read before the next one's is written */
  }
  probe_end<RM>(P);
}

} // namespace

/* The dynamic shared memory is declared by the kernels, outside the namespace (the symbol pipe.cuh and rows.cuh
 * name). */
__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_combine(ht_params P) {
  extern __shared__ __align__(16) char smem[];
  combine_kernel<false, false>(P, smem);
}
__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_combine_roles(ht_params P) {
  extern __shared__ __align__(16) char smem[];
  combine_kernel<false, true>(P, smem);
}
__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_combine_ahead(ht_params P) {
  extern __shared__ __align__(16) char smem[];
  combine_kernel<true, false>(P, smem);
}
__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_combine_ahead_roles(ht_params P) {
  extern __shared__ __align__(16) char smem[];
  combine_kernel<true, true>(P, smem);
}
