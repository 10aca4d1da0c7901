/*
 * attn_test.h — what the attention-dispatch CPU tests share: ranks as threads of one host group, seeded
 * plan descriptions, and the expectation computed from the description alone (where each sequence's rows
 * land: walk sources, then sequences, then replicas, handing out rows at each destination), never from the
 * plan's segment lists. Payload bytes encode (buffer, rank, row, byte) and are never zero.
 */
#ifndef SY_TEST_ATTN_TEST_H
#define SY_TEST_ATTN_TEST_H

#define TEST_SEED_DEFAULT 0xa77e5eed5eedull
#include "ranks.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISON 0xEE

/* ---- plan descriptions and where their rows land ---------------------------------------------------------- */

typedef enum gen_kind { GEN_RANDOM, GEN_ALL_TO_ONE, GEN_EMPTY_RANK, GEN_ALL_MINUS_ONE, GEN_KINDS } gen_kind_t;
static inline const char *gen_name(int kind) {
  static const char *names[GEN_KINDS] = {"random", "all to one rank", "a rank with no tokens", "every destination -1"};
  return kind >= 0 && kind < GEN_KINDS ? names[kind] : "?";
}

typedef struct gen {
  int W, C, kind;
  int num_seqs[MAX_RANKS];
  int64_t num_tokens[MAX_RANKS];
  int64_t *lens[MAX_RANKS], *start[MAX_RANKS]; /* start[r][i]: the sequence's first MLP row */
  int *q_dst[MAX_RANKS], *kv_dst[MAX_RANKS];
  int64_t *q_pos[MAX_RANKS], *kv_pos[MAX_RANKS]; /* its first row at the destination, -1 if not sent */
  int64_t q_total[MAX_RANKS], kv_total[MAX_RANKS]; /* rows each rank receives */
  int64_t q_pair[MAX_RANKS][MAX_RANKS], kv_pair[MAX_RANKS][MAX_RANKS]; /* [source][destination] rows */
  int64_t max_tokens, max_q, max_kv;
  sy_attn_plan_desc_t desc;
} gen_t;

/* A seeded description: up to max_seqs sequences per rank of 1..40 tokens (one in four up to 300), Q to a
 * random rank or -1, KV to C distinct ranks (a shuffle) with some slots -1. */
static inline void gen_make(gen_t *g, int W, int C, gen_kind_t kind, int max_seqs, uint64_t gen_seed) {
  memset(g, 0, sizeof *g);
  g->W = W;
  g->C = C;
  g->kind = kind;
  uint64_t rng = mix(seed ^ gen_seed);
  const int target = (int)(rng_next(&rng) % (uint64_t)W); /* GEN_ALL_TO_ONE's rank */
  const int empty = (int)(rng_next(&rng) % (uint64_t)W);  /* GEN_EMPTY_RANK's rank */
  for (int r = 0; r < W; r++) {
    int n = (int)(rng_next(&rng) % (uint64_t)(max_seqs + 1));
    if (kind == GEN_EMPTY_RANK && r == empty) n = 0;
    if (kind != GEN_EMPTY_RANK && n == 0) n = 1 + (int)(rng_next(&rng) % 3);
    g->num_seqs[r] = n;
    g->lens[r] = calloc((size_t)n + 1, sizeof(int64_t));
    g->start[r] = calloc((size_t)n + 1, sizeof(int64_t));
    g->q_dst[r] = calloc((size_t)n + 1, sizeof(int));
    g->q_pos[r] = calloc((size_t)n + 1, sizeof(int64_t));
    g->kv_dst[r] = calloc((size_t)n * (size_t)C + 1, sizeof(int));
    g->kv_pos[r] = calloc((size_t)n * (size_t)C + 1, sizeof(int64_t));
    for (int i = 0; i < n; i++) {
      g->lens[r][i] = 1 + (int64_t)(rng_next(&rng) % (rng_next(&rng) % 4 == 0 ? 300 : 40));
      g->start[r][i] = g->num_tokens[r];
      g->num_tokens[r] += g->lens[r][i];
      int q = (int)(rng_next(&rng) % (uint64_t)W);
      if (rng_next(&rng) % 6 == 0) q = -1;
      if (kind == GEN_ALL_TO_ONE) q = target;
      if (kind == GEN_ALL_MINUS_ONE) q = -1;
      g->q_dst[r][i] = q;
      int perm[MAX_RANKS];
      for (int k = 0; k < W; k++) perm[k] = k;
      for (int k = W - 1; k > 0; k--) {
        int j = (int)(rng_next(&rng) % (uint64_t)(k + 1)), t = perm[k];
        perm[k] = perm[j];
        perm[j] = t;
      }
      for (int c = 0; c < C; c++) {
        int d = perm[c];
        if (kind == GEN_RANDOM && rng_next(&rng) % 5 == 0) d = -1;
        if (kind == GEN_ALL_TO_ONE) d = c == i % C ? target : -1; /* every KV row to the one rank too */
        if (kind == GEN_ALL_MINUS_ONE) d = -1;
        g->kv_dst[r][(size_t)i * C + c] = d;
      }
    }
  }
  /* Where rows land: by source, then sequence, then replica. */
  for (int s = 0; s < W; s++) {
    for (int i = 0; i < g->num_seqs[s]; i++) {
      const int q = g->q_dst[s][i];
      g->q_pos[s][i] = q < 0 ? -1 : g->q_total[q];
      if (q >= 0) g->q_total[q] += g->lens[s][i], g->q_pair[s][q] += g->lens[s][i];
      for (int c = 0; c < C; c++) {
        const int d = g->kv_dst[s][(size_t)i * C + c];
        g->kv_pos[s][(size_t)i * C + c] = d < 0 ? -1 : g->kv_total[d];
        if (d >= 0) g->kv_total[d] += g->lens[s][i], g->kv_pair[s][d] += g->lens[s][i];
      }
    }
  }
  for (int r = 0; r < W; r++) {
    if (g->num_tokens[r] > g->max_tokens) g->max_tokens = g->num_tokens[r];
    if (g->q_total[r] > g->max_q) g->max_q = g->q_total[r];
    if (g->kv_total[r] > g->max_kv) g->max_kv = g->kv_total[r];
  }
  sy_attn_plan_desc_t d = SY_ATTN_PLAN_DESC_INIT;
  d.world_size = W;
  d.max_replicas = C;
  d.num_seqs = g->num_seqs;
  d.num_tokens = g->num_tokens;
  d.seq_lens = (const int64_t *const *)g->lens;
  d.q_dst = (const int *const *)g->q_dst;
  d.kv_dst = C > 0 ? (const int *const *)g->kv_dst : NULL;
  g->desc = d;
}

static inline void gen_free(gen_t *g) {
  for (int r = 0; r < g->W; r++) {
    free(g->lens[r]);
    free(g->start[r]);
    free(g->q_dst[r]);
    free(g->q_pos[r]);
    free(g->kv_dst[r]);
    free(g->kv_pos[r]);
  }
}

/* ---- payload ------------------------------------------------------------------------------------------- */

enum { BUF_Q = 1, BUF_KV = 2, BUF_ATTN = 3 }; /* which input a row belongs to */

/* Row `row` of rank `rank`'s buffer `which` in round `round`: bytes never zero, distinct per row. */
static inline void payload_row(unsigned char *out, int which, int rank, int64_t row, uint64_t round, size_t row_bytes) {
  const uint64_t key = mix(seed ^ ((uint64_t)which << 56) ^ ((uint64_t)rank << 48) ^ (round << 32)) ^ (uint64_t)row;
  for (size_t b = 0; b < row_bytes; b += 8) {
    uint64_t h = mix(key ^ ((uint64_t)b << 40));
    for (size_t k = 0; k < 8 && b + k < row_bytes; k++) out[b + k] = (unsigned char)((h >> (8 * k)) % 255 + 1);
  }
}

static inline void payload_fill(unsigned char *out, int which, int rank, int64_t rows, uint64_t round, size_t row_bytes) {
  for (int64_t r = 0; r < rows; r++) payload_row(out + (size_t)r * row_bytes, which, rank, r, round, row_bytes);
}

/* Reports the first byte where got differs from want; returns 1 if any does. */
static inline int compare_bytes(const unsigned char *got, const unsigned char *want, size_t bytes, size_t row_bytes,
                         const char *what) {
  if (!memcmp(got, want, bytes)) return 0;
  for (size_t i = 0; i < bytes; i++) {
    if (got[i] != want[i]) {
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);
      fprintf(stderr, "%s: byte %zu (row %zu, byte %zu of the row) is 0x%02x, want 0x%02x (seed 0x%llx)\n", what, i,
              row_bytes ? i / row_bytes : 0, row_bytes ? i % row_bytes : i, got[i], want[i],
              (unsigned long long)seed);
      break;
    }
  }
  return 1;
}

#endif
