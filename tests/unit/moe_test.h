/*
 * moe_test.h — what the MoE dispatch/combine CPU tests share: ranks as threads of one host group, seeded
 * inputs any rank can regenerate for any rank and round (tokens, routing, weights, expert outputs: the
 * generators of tests/workload, in the CPU tests' draw), and the expectation computed here from switchyard.h's
 * words alone: slots of a local expert handed out by walking sources, then source tokens; FP8 groups quantised
 * with amax/scale written out here (only the per-value rules, sy__fp8_group_scale and sy__fp8_e4m3_from_float,
 * come from the library); the combine's fmaf sums in the order the header states. Nothing here calls
 * src/ref/moe_ref.c or the backend's helpers.
 */
#ifndef SY_TEST_MOE_TEST_H
#define SY_TEST_MOE_TEST_H

#define TEST_SEED_DEFAULT 0x30e5eed5eedull
#include "ranks.h"
#include "ref/attn_ref.h"
#include "ref/fp8.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POISON 0xEE

/* ---- a case and its seeded inputs ---------------------------------------------------------------------- */

typedef struct moe_case {
  const char *name;
  int W, E, K, H, T;
  sy_moe_wire_t wire;
  unsigned flags;
  sy_index_type_t id_type;
  int route, rounds, mode, specials, check_ref; /* route: a wl_route_t */
  uint64_t salt;
} moe_case_t;

static inline sy_moe_config_t case_config(const moe_case_t *c) {
  sy_moe_config_t config = SY_MOE_CONFIG_INIT;
  config.max_tokens = c->T;
  config.hidden = c->H;
  config.top_k = c->K;
  config.num_experts = c->E;
  config.wire = c->wire;
  config.flags = c->flags;
  return config;
}

/* The case's generator: its inputs are a function of (seed, salt) and their place, drawn as the CPU tests
 * always have (WL_DRAW_UNIT). */
static inline wl_moe_t case_gen(const moe_case_t *c) {
  const wl_moe_t m = {.seed = seed,
                      .salt = c->salt,
                      .world = c->W,
                      .num_experts = c->E,
                      .top_k = c->K,
                      .hidden = c->H,
                      .max_tokens = c->T,
                      .route = (wl_route_t)c->route,
                      .specials = c->specials,
                      .draw = WL_DRAW_UNIT};
  return m;
}

static inline uint64_t case_key(const moe_case_t *c, uint64_t what, uint64_t round, uint64_t rank) {
  return wl_moe_key(seed, c->salt, what, round, rank);
}

/* Expert outputs [L][S][H] of rank `rank`, every slot. */
static inline void gen_expert_out(const moe_case_t *c, int round, int rank, uint16_t *y) {
  const wl_moe_t m = case_gen(c);
  const int L = c->E / c->W, S = c->W * c->T;
  for (int e = 0; e < L; e++)
    for (int s = 0; s < S; s++) wl_moe_expert_row(&m, round, rank, e, s, y + ((size_t)e * S + s) * c->H);
}

/* ---- every rank's inputs of a round, regenerated ------------------------------------------------------------ */

typedef struct world_inputs {
  int n[MAX_RANKS];
  int64_t *ids[MAX_RANKS]; /* [T][K] */
  float *w[MAX_RANKS], *cw[MAX_RANKS];
  uint16_t *tok[MAX_RANKS]; /* [T][H] */
} world_inputs_t;

static inline void inputs_alloc(const moe_case_t *c, world_inputs_t *wi) {
  memset(wi, 0, sizeof *wi);
  for (int r = 0; r < c->W; r++) {
    wi->ids[r] = malloc((size_t)c->T * c->K * sizeof(int64_t));
    wi->w[r] = malloc((size_t)c->T * c->K * sizeof(float));
    wi->cw[r] = malloc((size_t)c->T * c->K * sizeof(float));
    wi->tok[r] = malloc((size_t)c->T * c->H * sizeof(uint16_t));
  }
}

static inline void inputs_free(const moe_case_t *c, world_inputs_t *wi) {
  for (int r = 0; r < c->W; r++) free(wi->ids[r]), free(wi->w[r]), free(wi->cw[r]), free(wi->tok[r]);
}

static inline void inputs_gen(const moe_case_t *c, int round, world_inputs_t *wi) {
  const wl_moe_t m = case_gen(c);
  for (int r = 0; r < c->W; r++) {
    wi->n[r] = wl_moe_num_tokens(&m, round, r);
    wl_moe_ids(&m, round, r, wi->n[r], wi->ids[r]);
    wl_moe_weights(&m, round, r, wi->n[r], 0, wi->w[r]);
    wl_moe_weights(&m, round, r, wi->n[r], 1, wi->cw[r]);
    wl_moe_tokens(&m, round, r, wi->n[r], wi->tok[r]);
  }
}

/* ---- the expectation ------------------------------------------------------------------------------------------ */

/* Whether token t of rank s is routed to expert x. */
static inline int routed_to(const moe_case_t *c, const world_inputs_t *wi, int s, int t, int64_t x) {
  for (int k = 0; k < c->K; k++)
    if (wi->ids[s][(size_t)t * c->K + k] == x) return 1;
  return 0;
}

/* The FP8 wire's bytes and scales of one bf16 token, written from the header's words. */
static inline void quantise(const uint16_t *tok, int H, int ue8m0, uint8_t *q, float *scales) {
  for (int g = 0; g < H / 128; g++) {
    float amax = 0.0f;
    for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(sy__bf16_to_float(tok[g * 128 + i])));
    scales[g] = sy__fp8_group_scale(amax, ue8m0);
    for (int i = 0; i < 128; i++)
      q[g * 128 + i] = sy__fp8_e4m3_from_float(sy__bf16_to_float(tok[g * 128 + i]) / scales[g]);
  }
}

static inline int all_poison(const void *p, size_t bytes) {
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++)
    if (b[i] != POISON) return 0;
  return 1;
}

/* Checks what rank `me` received against every rank's regenerated inputs; returns the failures (reporting
 * the first few). Slots beyond a count must still hold the poison. */
static inline int check_dispatch(const moe_case_t *c, const world_inputs_t *wi, int me, const sy_moe_recv_t *recv,
                                 const char *what) {
  const int L = c->E / c->W, S = c->W * c->T, G = c->H / 128, fp8 = c->wire != SY_MOE_WIRE_BF16;
  const size_t elem = fp8 ? 1 : 2, row = (size_t)c->H * elem;
  unsigned char *want = malloc(row);
  float *scales = malloc((size_t)(G ? G : 1) * sizeof(float));
  int bad = 0;
#define FAIL(...)                                                    \
  do {                                                               \
    if (bad++ < 4) {                                                 \
      fprintf(stderr, "%s: rank %d: ", what, me);                    \
      fprintf(stderr, __VA_ARGS__);                                  \
      fprintf(stderr, " (seed 0x%llx)\n", (unsigned long long)seed); \
    }                                                                \
  } while (0)
  for (int e = 0; e < L; e++) {
    const int64_t x = (int64_t)me * L + e;
    int slot = 0;
    for (int s = 0; s < c->W; s++) {
      int from_s = 0;
      for (int t = 0; t < wi->n[s]; t++) {
        if (!routed_to(c, wi, s, t, x)) continue;
        const size_t at = (size_t)e * S + (size_t)slot;
        if (slot >= S) {
          FAIL("expert %d got more than S=%d slots", e, S);
          break;
        }
        const uint16_t *tok = wi->tok[s] + (size_t)t * c->H;
        if (fp8) quantise(tok, c->H, c->wire == SY_MOE_WIRE_FP8_UE8M0, want, scales);
        else memcpy(want, tok, row);
        if (memcmp((const unsigned char *)recv->tokens + at * row, want, row))
          FAIL("expert %d slot %d (rank %d token %d): token bytes differ", e, slot, s, t);
        for (int g = 0; fp8 && g < G; g++) {
          const float got = recv->scales[((size_t)e * G + g) * S + slot];
          if (memcmp(&got, &scales[g], sizeof got))
            FAIL("expert %d slot %d group %d: scale %a, want %a", e, slot, g, (double)got, (double)scales[g]);
        }
        if (recv->src[2 * at] != s || recv->src[2 * at + 1] != t)
          FAIL("expert %d slot %d: src {%d, %d}, want {%d, %d}", e, slot, recv->src[2 * at], recv->src[2 * at + 1], s,
               t);
        slot++;
        from_s++;
      }
      if (recv->rank_counts[(size_t)e * c->W + s] != from_s)
        FAIL("rank_counts[%d][%d]=%d, want %d", e, s, recv->rank_counts[(size_t)e * c->W + s], from_s);
    }
    if (recv->expert_counts[e] != slot) FAIL("expert_counts[%d]=%d, want %d", e, recv->expert_counts[e], slot);
    for (int sl = slot; sl < S; sl++) {
      const size_t at = (size_t)e * S + (size_t)sl;
      int kept = all_poison((const unsigned char *)recv->tokens + at * row, row) && all_poison(&recv->src[2 * at], 8);
      for (int g = 0; fp8 && g < G; g++) kept = kept && all_poison(&recv->scales[((size_t)e * G + g) * S + sl], 4);
      if (!kept) {
        FAIL("expert %d slot %d at or past its count %d was written", e, sl, slot);
        break;
      }
    }
  }
#undef FAIL
  free(want);
  free(scales);
  if (bad) __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);
  return bad;
}

/* What owner `o` must get from the combine: the header's sums, in its order, over the experts' outputs in
 * the slots the dispatch gave (walking sources, then tokens, per expert). */
static inline void expect_combine(const moe_case_t *c, const world_inputs_t *wi, int round, int o, uint16_t *out) {
  const int L = c->E / c->W, K = c->K;
  const wl_moe_t m = case_gen(c);                 /* the experts' outputs, regenerated */
  int *next = calloc((size_t)c->E, sizeof *next); /* the next slot of each expert for o's tokens */
  for (int s = 0; s < o; s++)
    for (int t = 0; t < wi->n[s]; t++)
      for (int k = 0; k < K; k++)
        if (wi->ids[s][(size_t)t * K + k] >= 0) next[wi->ids[s][(size_t)t * K + k]]++;
  int slot[32];
  for (int t = 0; t < wi->n[o]; t++) {
    const int64_t *ids = wi->ids[o] + (size_t)t * K;
    for (int k = 0; k < K; k++) slot[k] = ids[k] >= 0 ? next[ids[k]]++ : -1;
    for (int h = 0; h < c->H; h++) {
      float acc = 0.0f;
      if (c->flags & SY_MOE_PER_EXPERT) {
        for (int k = 0; k < K; k++) {
          if (ids[k] < 0) continue;
          const int r = (int)(ids[k] / L), e = (int)(ids[k] % L);
          const float y = sy__bf16_to_float(wl_moe_expert_out(&m, round, r, e, slot[k], h));
          acc = fmaf(wi->cw[o][(size_t)t * K + k], y, acc);
        }
      } else {
        for (int r = 0; r < c->W; r++) {
          float partial = 0.0f;
          int held = 0;
          for (int k = 0; k < K; k++) {
            if (ids[k] < 0 || ids[k] / L != r) continue;
            const float y = sy__bf16_to_float(wl_moe_expert_out(&m, round, r, (int)(ids[k] % L), slot[k], h));
            partial = fmaf(wi->w[o][(size_t)t * K + k], y, partial);
            held = 1;
          }
          if (held) acc += sy__bf16_to_float(sy__float_to_bf16(partial));
        }
      }
      out[(size_t)t * c->H + h] = sy__float_to_bf16(acc);
    }
  }
  free(next);
}

/* Compares out (num_tokens rows, then poison up to max_tokens) with the expectation; returns failures. */
static inline int check_combine(const moe_case_t *c, const world_inputs_t *wi, int round, int me, const uint16_t *out,
                                const char *what) {
  uint16_t *want = malloc((size_t)c->T * c->H * sizeof *want);
  expect_combine(c, wi, round, me, want);
  int bad = 0;
  for (size_t i = 0; i < (size_t)wi->n[me] * c->H; i++) {
    if (out[i] == want[i]) continue;
    if (bad++ < 4)
      fprintf(stderr, "%s: rank %d round %d: out[%zu][%zu]=0x%04x, want 0x%04x (seed 0x%llx)\n", what, me, round,
              i / (size_t)c->H, i % (size_t)c->H, out[i], want[i], (unsigned long long)seed);
  }
  const size_t used = (size_t)wi->n[me] * c->H * 2, all = (size_t)c->T * c->H * 2;
  if (!all_poison((const unsigned char *)out + used, all - used)) {
    bad++;
    fprintf(stderr, "%s: rank %d round %d: out past num_tokens=%d was written\n", what, me, round, wi->n[me]);
  }
  free(want);
  if (bad) __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);
  return bad;
}

#endif
