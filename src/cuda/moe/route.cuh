/*
 * route.cuh — dispatch_send, first phase: where every unit goes. A unit is a token (default: one message per
 * (token, destination rank)) or a (token, k) pair (SY_MOE_PER_EXPERT: one message per (token, expert)).
 *   every block   loads and checks the ids into shared memory (bad ones reported by block 0 and treated as -1),
 *                 then routes every unit itself — no grid sync: per destination rank a 32-unit mask word, so a
 *                 unit's message index at p is a popcount (messages to p are in token order) — while its first
 *                 token's data loads (send_begin);
 *   block 0       also publishes, per destination, the message count and the messages naming each expert there
 *                 (publish_counts), and keeps the ids for the combine.
 * send_state carries the phase's results (shared-memory arrays, the call) to send.cuh and direct.cuh.
 */
#ifndef SY_CUDA_MOE_ROUTE_CUH
#define SY_CUDA_MOE_ROUTE_CUH

#include "cuda/moe/moe.cuh"

namespace sy {

/* dispatch_send's static shared memory: the call, and the current token's messages (thread 0 of a block, or the
 * thread of a destination, sets them up; the whole block stores the payload and headers). */
struct send_shared {
  uint64_t call;
  int ndest;                 /* the token's messages */
  int dest[MOE_MAX_K];       /* per message: its destination rank */
  int index[MOE_MAX_K];      /* its index among this source's messages to the destination */
  uint32_t kmask[MOE_MAX_K]; /* the k it carries */
  char *header[MOE_MAX_K];   /* where it goes (NULL: staged for a put) */
  char *payload[MOE_MAX_K];  /* where its payload and scales go (NULL: none, direct to this rank, or a put) */
  float weight[MOE_MAX_K];   /* per k of the token */
  int position[MOE_MAX_K];   /* per k: earlier messages naming the same expert */
  int any_put;               /* some message of the token goes by a put */
  int nown;                  /* direct: entries in own_list */
};

/* dispatch_send's state from phase to phase: arrays in dynamic shared memory (send_smem), the call, and the
 * block's first token, loaded early. */
struct send_state {
  char **peers;                    /* [world]: each rank's workspace as this GPU reaches it (NULL: puts) */
  unsigned long long *token_ranks; /* [max_tokens] */
  uint32_t *unit_masks;            /* [world][mask_words] */
  int *prefix;                     /* [world][mask_words + 1] */
  int *ids;                        /* [max_tokens][top_k] */
  int *named;                      /* [num_experts] */
  uint32_t *expert_tokens;         /* [num_experts][token_words] (expert_token_masks) */
  int4 *own_list;                  /* [own_cap] (direct) */
  int mask_words, token_words;
  bool one_pass; /* top_k a power of two and world <= 64: route_one_pass, else route_two_pass */
  uint64_t call;
  int parity;
  /* The thread's vector slot: warp 0 (which sets up each token's messages) last — with up to 480 vectors per
   * round (hidden <= 7680 FP8, 3840 BF16) it carries none in round 0, so its setup runs alone before the
   * bar.sync while the other warps quantise. */
  int vslot;
  int vectors;            /* per token: FP8 16 elements per lane (8 lanes per group), BF16 8 */
  int first_token;        /* tokens go to blocks from the last one down (token t to block grid - 1 - t, then t + grid,
                    * ...): block 0, which also publishes the counts and keeps the ids, holds a token only when
                    * every block has one */
  uint4 first_a, first_b; /* the first token's round 0 (vector vslot), loaded at the start */
  float first_w;          /* and its weight k = threadIdx.x */
  uint4 kept;             /* round 0 of the block's last token (vector vslot), quantised: the direct part reuses it */
  float kept_scale;
};

/* Routing for top-k not a power of two, or world > 64 (route_units says what it computes): repeats by scans of the
 * token's row and ranks into token_ranks[t], then a warp per mask word ballots. Out of line: cold at the usual
 * configurations. */
static __device__ __noinline__ void route_two_pass(const moe_params &P, uint64_t call, int *ids,
                                                   unsigned long long *token_ranks, uint32_t *unit_masks, int *named,
                                                   uint32_t *expert_tokens) {
  const int world = P.world_size, top_k = P.top_k, local_experts = P.local_experts, num_tokens = P.num_tokens;
  const int units_per_token = P.per_expert ? top_k : 1, mask_words = (P.messages_per_source + 31) / 32;
  const int token_words = (P.max_tokens + 31) / 32, words = (num_tokens * units_per_token + 31) / 32;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
  for (int base = 0; base < num_tokens * top_k; base += blockDim.x) {
    const int i = base + (int)threadIdx.x, t = i / top_k, k = i % top_k;
    uint64_t bit = 0;
    if (i < num_tokens * top_k && ids[i] >= 0) {
      const int v = ids[i];
      bool dup = false;
      for (int j = 0; j < k; j++) dup = dup || ids[(size_t)t * top_k + j] == v;
      if (dup) {
        if (blockIdx.x == 0) report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_IDS, t, call, (uint64_t)k, (uint64_t)v);
        ids[i] = -1;
      } else {
        bit = 1ull << ((v / local_experts) & 63);
        if (blockIdx.x == 0) atomicAdd(&named[v], 1); /* a token names an expert once: one message each */
        if (P.expert_token_masks) atomicOr(&expert_tokens[(size_t)v * token_words + t / 32], 1u << (t & 31));
      }
    }
    if (world <= 64 && bit) atomicOr(&token_ranks[t], bit);
  }
  __syncthreads();

  for (int c = (int)warp; c < words; c += MOE_WARPS) {
    const int u = c * 32 + (int)lane;
    for (int w0 = 0; w0 < world; w0 += 64) {
      uint64_t dm = 0;
      if (u < num_tokens * units_per_token && world <= 64 && !P.per_expert) dm = token_ranks[u];
      else if (u < num_tokens * units_per_token)
        for (int k = P.per_expert ? u % top_k : 0; k < (P.per_expert ? u % top_k + 1 : top_k); k++) {
          const int e = ids[(size_t)(u / units_per_token) * top_k + k];
          const int p = e >= 0 ? e / local_experts : -1;
          if (p >= w0 && p < w0 + 64) dm |= 1ull << (p - w0);
        }
      const int wend = world < w0 + 64 ? world : w0 + 64;
      for (int p = w0; p < wend; p++) {
        const uint32_t m = __ballot_sync(0xFFFFFFFFu, (dm >> (p - w0)) & 1u);
        if (lane == 0) unit_masks[(size_t)p * mask_words + c] = m;
      }
    }
  }
}

/* The prologue: shared-memory arrays, the call number, the peers, the first token's data on its way, and the ids
 * loaded once (coalesced, independent loads) and checked: outside [-1, num_experts) reported and set to -1. */
template <int MODE>
__device__ __forceinline__ void send_begin(const moe_params &P, send_state &S, send_shared &sh) {
  constexpr bool fp8 = MODE & MODE_FP8, PE = MODE & MODE_PE, TR = MODE & MODE_TRACE;
  extern __shared__ uint64_t moe_dyn[];
  const int world = P.world_size, top_k = P.top_k, num_tokens = P.num_tokens;
  const send_smem L = send_smem_layout(world, P.max_tokens, top_k, P.num_experts, P.messages_per_source,
                                       P.expert_token_masks, P.own_cap);
  char *base = (char *)moe_dyn;
  S.peers = (char **)base;
  S.token_ranks = (unsigned long long *)(base + L.token_ranks);
  S.unit_masks = (uint32_t *)(base + L.unit_masks);
  S.prefix = (int *)(base + L.prefix);
  S.ids = (int *)(base + L.ids);
  S.named = (int *)(base + L.named);
  S.expert_tokens = (uint32_t *)(base + L.expert_tokens);
  S.own_list = (int4 *)(base + L.own_list);
  S.mask_words = (P.messages_per_source + 31) / 32;
  S.token_words = (P.max_tokens + 31) / 32;

  /* The block's first token: its first round of vectors (vector vslot) and its weights, loaded now, so that their
   * latency passes during the routing instead of after it. */
  S.vectors = fp8 ? P.hidden / 16 : P.hidden / 8;
  S.vslot = (int)(threadIdx.x + MOE_THREADS - 32) % MOE_THREADS;
  S.first_token = (int)gridDim.x - 1 - (int)blockIdx.x;
  S.first_a = make_uint4(0, 0, 0, 0);
  S.first_b = make_uint4(0, 0, 0, 0);
  S.first_w = 0.0f;
  if (S.first_token < num_tokens) {
    const uint16_t *tok0 = P.tokens + (uint64_t)S.first_token * P.hidden;
    if (S.vslot < S.vectors) {
      S.first_a = __ldg((const uint4 *)(tok0 + (uint64_t)S.vslot * (fp8 ? 16 : 8)));
      if (fp8) S.first_b = __ldg((const uint4 *)(tok0 + (uint64_t)S.vslot * 16 + 8));
    }
    if (threadIdx.x < (unsigned)top_k && P.weights)
      S.first_w = P.weights[(uint64_t)S.first_token * top_k + threadIdx.x];
  }
  if (threadIdx.x == 0) {
    sh.call = current_call(P) + 1;
    sh.nown = 0;
  }
  for (int p = threadIdx.x; p < world; p += blockDim.x) S.peers[p] = peer_ws(P, p);
  for (int i = threadIdx.x; i < num_tokens * top_k; i += blockDim.x) {
    const int64_t id = load_id(P, (uint64_t)i);
    const bool bad = id < -1 || id >= P.num_experts;
    if (bad && blockIdx.x == 0)
      report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_IDS, i / top_k, current_call(P) + 1, (uint64_t)(i % top_k),
                   (uint64_t)id);
    S.ids[i] = bad ? -1 : (int)id;
  }
  S.one_pass = (top_k & (top_k - 1)) == 0 && world <= 64;
  if (!S.one_pass)
    for (int t = threadIdx.x; t < num_tokens; t += blockDim.x) S.token_ranks[t] = 0;
  else if (!PE)
    for (int i = threadIdx.x; i < world * S.mask_words; i += blockDim.x) S.unit_masks[i] = 0;
  if (blockIdx.x == 0)
    for (int e = threadIdx.x; e < P.num_experts; e += blockDim.x) S.named[e] = 0;
  if (P.expert_token_masks)
    for (int i = threadIdx.x; i < P.num_experts * S.token_words; i += blockDim.x) S.expert_tokens[i] = 0;
  __syncthreads();
  S.call = sh.call;
  S.parity = (int)(S.call & 1);
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_KERNEL, true, -1, S.call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_ROUTE, true, -1, S.call);
  }
}

/* route_units' one pass (top_k a power of two, world <= 64; route_units says what it computes). */
template <int MODE>
__device__ __forceinline__ void route_one_pass(const moe_params &P, send_state &S) {
  constexpr bool PE = MODE & MODE_PE;
  const int world = P.world_size, top_k = P.top_k, local_experts = P.local_experts, num_tokens = P.num_tokens;
  const int mask_words = S.mask_words, token_words = S.token_words;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
  const int lg_k = __ffs(top_k) - 1;
  for (int base = 0; base < num_tokens * top_k; base += blockDim.x) {
    const int i = base + (int)threadIdx.x, t = i >> lg_k, k = i & (top_k - 1);
    int v = i < num_tokens * top_k ? S.ids[i] : -1;
    bool dup = false;
    for (int j = 0; j < top_k; j++) {
      const int w = __shfl_sync(0xFFFFFFFFu, v, (int)(lane & ~(unsigned)(top_k - 1)) | j);
      dup |= j < k && w == v;
    }
    if (v >= 0 && dup) {
      if (blockIdx.x == 0) report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_IDS, t, S.call, (uint64_t)k, (uint64_t)v);
      S.ids[i] = -1;
      v = -1;
    }
    const int p = v >= 0 ? v / local_experts : -1;
    if (v >= 0) {
      if (blockIdx.x == 0) atomicAdd(&S.named[v], 1); /* a token names an expert once: one message each */
      if (P.expert_token_masks) atomicOr(&S.expert_tokens[(size_t)v * token_words + t / 32], 1u << (t & 31));
    }
    if (PE) { /* units are the (token, k) = i: this warp's lanes are word base / 32 + warp */
      const bool any = base + (int)warp * 32 < num_tokens * top_k;
      for (int q = 0; q < world; q++) {
        const uint32_t m = __ballot_sync(0xFFFFFFFFu, p == q);
        if (lane == 0 && any) S.unit_masks[(size_t)q * mask_words + base / 32 + warp] = m;
      }
    } else {
      uint64_t bit = p >= 0 ? 1ull << p : 0;
      for (int off = 1; off < top_k; off <<= 1) bit |= __shfl_xor_sync(0xFFFFFFFFu, bit, off);
      /* lanes k = 0 hold their token's ranks: tokens t0 .. t0 + 32 / top_k - 1, in word t0 / 32; lane q (and q + 32)
       * packs rank q's bits and ORs them in */
      const int t0 = (base >> lg_k) + (int)warp * (32 >> lg_k);
      uint32_t mine0 = 0, mine1 = 0;
      for (int q = 0; q < world; q++) {
        const uint32_t m = __ballot_sync(0xFFFFFFFFu, k == 0 && ((bit >> q) & 1u));
        if (q == (int)lane) mine0 = m;
        if (q == (int)lane + 32) mine1 = m;
      }
      for (int h = 0; h < 2; h++) {
        const uint32_t m = h ? mine1 : mine0;
        if (!m) continue;
        uint32_t packed = 0;
#pragma unroll 1
        for (int j = 0; j < (32 >> lg_k); j++) packed |= ((m >> (j << lg_k)) & 1u) << j;
        atomicOr(&S.unit_masks[(size_t)((int)lane + 32 * h) * mask_words + t0 / 32], packed << (t0 & 31));
      }
    }
  }
}

/* A repeat of an earlier k of the same token: reported, -1 (clearing a repeat in place cannot hide another: its
 * value stays at its first k, which is never cleared). Then routing: unit_masks[p][c] bit j = unit 32c + j goes to
 * rank p. With top_k a power of two and world <= 64, one pass: a thread per (token, k), the token's top_k lanes in
 * one warp — repeats found by shuffles, the token's ranks OR-ed by shuffles, and each warp's ballots put into the
 * masks (OR-ed in for tokens: a warp holds 32 / top_k of a word's 32). Otherwise two passes (route_two_pass).
 * Block 0 also counts each expert's messages (named) and, with expert_token_masks, every block marks each
 * expert's tokens (the positions, send.cuh). */
template <int MODE>
__device__ __forceinline__ void route_units(const moe_params &P, send_state &S) {
  if (S.one_pass) {
    route_one_pass<MODE>(P, S);
  } else {
    route_two_pass(P, S.call, S.ids, S.token_ranks, S.unit_masks, S.named, S.expert_tokens);
  }
}

/* The prefix of each destination's mask words (a unit's message index at p); block 0 tells every destination how
 * many messages it gets (0 too: every destination hears from every source) and, where it gets any, how many name
 * each of its experts — both before block 0's signal add (send.cuh) releases them — and keeps the ids for the
 * combine. */
template <int MODE>
__device__ __forceinline__ void publish_counts(const moe_params &P, send_state &S) {
  constexpr bool PE = MODE & MODE_PE, TR = MODE & MODE_TRACE;
  const int world = P.world_size, top_k = P.top_k, local_experts = P.local_experts, me = P.ctx.rank;
  const int mask_words = S.mask_words, words = (P.num_tokens * (PE ? top_k : 1) + 31) / 32;
  __syncthreads();
  for (int p = threadIdx.x; p < world; p += blockDim.x) {
    int acc = 0;
#pragma unroll(PE ? 4 : 1) /* per expert a warp's 32 (token, k) units make a word: 8 x more words than tokens / 32 */
    for (int c = 0; c < words; c++) {
      S.prefix[(size_t)p * (mask_words + 1) + c] = acc;
      acc += __popc(S.unit_masks[(size_t)p * mask_words + c]);
    }
    S.prefix[(size_t)p * (mask_words + 1) + mask_words] = acc;
    if (blockIdx.x == 0) {
      const uint64_t off = counter_offset(P, S.parity, me, SY_MOE_COUNTER_MESSAGES);
      if (S.peers[p]) *(volatile uint64_t *)(S.peers[p] + off) = (uint64_t)acc;
      else p_u64_cold((uint64_t *)(P.ws + off), (uint64_t)acc, p);
    }
  }
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) P.local->num_tokens = P.num_tokens;
    for (int i = threadIdx.x; i < P.num_tokens * top_k; i += blockDim.x) P.ids[i] = S.ids[i];
  }
  __syncthreads();
  if (blockIdx.x == 0)
#pragma unroll 1
    for (int i = threadIdx.x; i < P.num_experts; i += blockDim.x) {
      const int p = i / local_experts;
      if (S.prefix[(size_t)p * (mask_words + 1) + mask_words] == 0) continue;
      const uint64_t off = counts_offset(P, S.parity, me, i - p * local_experts);
      if (S.peers[p]) *(int *)(S.peers[p] + off) = S.named[i];
      else p_int_cold((int *)(P.ws + off), S.named[i], p);
    }
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_ROUTE, false, -1, S.call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_COPY, true, -1, S.call);
  }
}

} // namespace sy

#endif
