/*
 * attn_plan_test.h — what the attention planner's tests (test_attn_plan.c, test_attn_plan_random.c) share: a
 * plan description the test owns (per-rank arrays it can change in place), building every rank's plan, a small
 * seeded random generator, and the library's log sent to a file for check_log_has.
 */
#ifndef SY_TEST_ATTN_PLAN_TEST_H
#define SY_TEST_ATTN_PLAN_TEST_H

#include "check.h"
#include "core/internal.h"
#include "plan/attn_plan.h"
#include "switchyard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXW 8

/* ---- a description the test owns ---------------------------------------------------------------------- */

typedef struct test_desc {
  int world, replicas;
  int num_seqs[MAXW];
  int64_t num_tokens[MAXW];
  int64_t *lens[MAXW];
  int *q[MAXW];
  int *kv[MAXW];
  const int64_t *lens_c[MAXW];
  const int *q_c[MAXW];
  const int *kv_c[MAXW];
  sy_attn_plan_desc_t desc;
} test_desc_t;

static inline void td_init(test_desc_t *t, int world, int replicas, const int *num_seqs) {
  memset(t, 0, sizeof *t);
  t->world = world;
  t->replicas = replicas;
  for (int r = 0; r < world; r++) {
    int n = num_seqs[r];
    t->num_seqs[r] = n;
    t->lens[r] = calloc((size_t)n + 1, sizeof(int64_t));
    t->q[r] = calloc((size_t)n + 1, sizeof(int));
    t->kv[r] = calloc((size_t)n * (size_t)replicas + 1, sizeof(int));
    t->lens_c[r] = t->lens[r];
    t->q_c[r] = t->q[r];
    t->kv_c[r] = t->kv[r];
  }
  sy_attn_plan_desc_t d = SY_ATTN_PLAN_DESC_INIT;
  d.world_size = world;
  d.max_replicas = replicas;
  d.num_seqs = t->num_seqs;
  d.num_tokens = t->num_tokens;
  d.seq_lens = t->lens_c;
  d.q_dst = t->q_c;
  d.kv_dst = t->kv_c;
  t->desc = d;
}

static inline void td_sum(test_desc_t *t) {
  for (int r = 0; r < t->world; r++) {
    t->num_tokens[r] = 0;
    for (int i = 0; i < t->num_seqs[r]; i++) t->num_tokens[r] += t->lens[r][i];
  }
}

static inline void td_free(test_desc_t *t) {
  for (int r = 0; r < t->world; r++) free(t->lens[r]), free(t->q[r]), free(t->kv[r]);
}

static inline int build_all(const sy_attn_plan_desc_t *desc, struct sy_attn_plan **plans) {
  int ok = 1;
  for (int r = 0; r < desc->world_size; r++) {
    plans[r] = NULL;
    sy_status_t st = sy__attn_plan_build(desc, r, &plans[r]);
    CHECK_OK(st);
    if (st != SY_SUCCESS || !plans[r]) ok = 0;
  }
  return ok;
}

static inline void free_all(struct sy_attn_plan **plans, int world) {
  for (int r = 0; r < world; r++) sy__attn_plan_free(plans[r], NULL);
}

/* ---- seeded random numbers ------------------------------------------------------------------------------- */

static uint64_t rng_state;
static inline uint32_t rnd(void) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}
static inline int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }

/* ---- the log, read back ----------------------------------------------------------------------------------- */

/* The library's warnings to dir/log.txt (dir: a mkdtemp template), where check_log_has reads them. */
static inline void plan_log_open(char *dir) {
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();
}

static inline void plan_log_close(const char *dir) {
  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
}

#endif
