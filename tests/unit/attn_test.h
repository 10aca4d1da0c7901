/*
 * attn_test.h — what the attention-dispatch CPU tests share: ranks as threads of one host group, seeded
 * plan descriptions and payload rows (tests/workload's, with the test's seed), and the expectation computed
 * from the description alone (where each sequence's rows land: walk sources, then sequences, then replicas,
 * handing out rows at each destination), never from the plan's segment lists. Payload bytes encode (buffer,
 * rank, row, byte) and are never zero.
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

typedef struct gen {
  wl_attn_desc_t d; /* the description (d.desc) and its arrays, from tests/workload */
  int kind;
  int64_t *start[MAX_RANKS];                       /* start[r][i]: the sequence's first MLP row */
  int64_t *q_pos[MAX_RANKS], *kv_pos[MAX_RANKS];   /* its first row at the destination, -1 if not sent */
  int64_t q_total[MAX_RANKS], kv_total[MAX_RANKS]; /* rows each rank receives */
  int64_t q_pair[MAX_RANKS][MAX_RANKS], kv_pair[MAX_RANKS][MAX_RANKS]; /* [source][destination] rows */
  int64_t max_tokens, max_q, max_kv;
} gen_t;

/* A seeded description (wl_attn_short_seqs, the CPU tests' draw: up to max_seqs sequences per rank of 1..40
 * tokens, one in four up to 300, Q to a random rank or -1, KV to C distinct ranks with some slots -1), and
 * where its rows land, worked out here from the description alone. */
static inline void gen_make(gen_t *g, int W, int C, wl_attn_kind_t kind, int max_seqs, uint64_t gen_seed) {
  memset(g, 0, sizeof *g);
  g->kind = kind;
  if (wl_attn_short_seqs(&g->d, W, C, kind, max_seqs, WL_DRAW_UNIT, seed ^ gen_seed)) {
    fprintf(stderr, "gen_make: out of memory\n");
    exit(1);
  }
  for (int r = 0; r < W; r++) {
    const int n = g->d.num_seqs[r];
    g->start[r] = calloc((size_t)n + 1, sizeof(int64_t));
    g->q_pos[r] = calloc((size_t)n + 1, sizeof(int64_t));
    g->kv_pos[r] = calloc((size_t)n * (size_t)C + 1, sizeof(int64_t));
    for (int i = 1; i < n; i++) g->start[r][i] = g->start[r][i - 1] + g->d.lens[r][i - 1];
  }
  /* Where rows land: by source, then sequence, then replica. */
  for (int s = 0; s < W; s++) {
    for (int i = 0; i < g->d.num_seqs[s]; i++) {
      const int64_t len = g->d.lens[s][i];
      const int q = g->d.q_dst[s][i];
      g->q_pos[s][i] = q < 0 ? -1 : g->q_total[q];
      if (q >= 0) g->q_total[q] += len, g->q_pair[s][q] += len;
      for (int c = 0; c < C; c++) {
        const int d = g->d.kv_dst[s][(size_t)i * C + c];
        g->kv_pos[s][(size_t)i * C + c] = d < 0 ? -1 : g->kv_total[d];
        if (d >= 0) g->kv_total[d] += len, g->kv_pair[s][d] += len;
      }
    }
  }
  for (int r = 0; r < W; r++) {
    if (g->d.num_tokens[r] > g->max_tokens) g->max_tokens = g->d.num_tokens[r];
    if (g->q_total[r] > g->max_q) g->max_q = g->q_total[r];
    if (g->kv_total[r] > g->max_kv) g->max_kv = g->kv_total[r];
  }
}

static inline void gen_free(gen_t *g) {
  for (int r = 0; r < g->d.W; r++) {
    free(g->start[r]);
    free(g->q_pos[r]);
    free(g->kv_pos[r]);
  }
  wl_attn_desc_free(&g->d);
}

/* ---- payload ------------------------------------------------------------------------------------------- */

enum { BUF_Q = 1, BUF_KV = 2, BUF_ATTN = 3 }; /* which input a row belongs to */

/* Row `row` of rank `rank`'s buffer `which` in round `round`: bytes never zero, distinct per row (the test's
 * seed in wl_payload_row). */
static inline void payload_row(unsigned char *out, int which, int rank, int64_t row, uint64_t round, size_t row_bytes) {
  wl_payload_row(out, seed, which, rank, row, round, row_bytes);
}

static inline void payload_fill(unsigned char *out, int which, int rank, int64_t rows, uint64_t round,
                                size_t row_bytes) {
  wl_payload_fill(out, seed, which, rank, rows, round, row_bytes);
}

/* Reports the first byte where got differs from want; returns 1 if any does. */
static inline int compare_bytes(const unsigned char *got, const unsigned char *want, size_t bytes, size_t row_bytes,
                                const char *what) {
  if (!memcmp(got, want, bytes)) return 0;
  for (size_t i = 0; i < bytes; i++) {
    if (got[i] != want[i]) {
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);
      fprintf(stderr, "%s: byte %zu (row %zu, byte %zu of the row) is 0x%02x, want 0x%02x (seed 0x%llx)\n", what, i,
              row_bytes ? i / row_bytes : 0, row_bytes ? i % row_bytes : i, got[i], want[i], (unsigned long long)seed);
      break;
    }
  }
  return 1;
}

#endif
