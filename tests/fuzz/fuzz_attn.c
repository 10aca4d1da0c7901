/*
 * fuzz_attn.c — libFuzzer target for the attention planners over the public API, on the host backend.
 * The first byte picks what the rest describes:
 *   even: a plan description (world 1..8, 0..world replicas, 0..12 sequences per rank of 1..64 tokens, q_dst
 *         and kv_dst mostly in range, now and then out of it, a rank listed twice, a wrong num_tokens or a
 *         negative length). Every rank's sy_attn_plan_create must accept it exactly when it is valid by the
 *         header's rules (else SY_ERR_INVALID_ARG and no plan), and the plans must keep attn_check.h's
 *         invariants;
 *   odd:  a placement input (world 1..8, 0..8 documents per rank of 1..2^20 tokens, tolerance, shard limit,
 *         row weights; now and then a negative length, count, tolerance or limit). sy_attn_place must accept
 *         it exactly when it is valid; its result must keep the placement invariants, and every rank's plan
 *         of the description it gives must be created and keep the plan invariants.
 * Each run is bounded (at most 8 x 12 sequences of 64 tokens, or 8 x 8 documents) so it takes milliseconds.
 * Communicators for every world size are made once (LLVMFuzzerInitialize); plan creation is local.
 * Build: cmake -DSY_FUZZ=ON with clang (docs/contributing.md, "Sanitizers and fuzzing").
 */
#include "attn_check.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- bytes in ------------------------------------------------------------------------------------------- */

typedef struct bytes {
  const uint8_t *at;
  size_t left;
} bytes_t;

/* The next byte; zeros once the input is used up (so every prefix of an input is an input). */
static unsigned next8(bytes_t *b) {
  if (!b->left) return 0;
  b->left--;
  return *b->at++;
}

static uint32_t next32(bytes_t *b) {
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) v = v << 8 | next8(b);
  return v;
}

/* A rank for a destination list: -1..W-1 mostly, and now and then one out of range (W, W + 1, -2, -3). */
static int next_rank(bytes_t *b, int W) {
  const unsigned v = next8(b);
  if (v < 240) return (int)(v % (unsigned)(W + 1)) - 1;
  return v % 2 ? W + (int)(v % 3 == 0) : -2 - (int)(v % 3 == 0);
}

/* ---- communicators: rank r of world W is comms[W][r] -------------------------------------------------- */

static sy_comm_t comms[FUZZ_MAX_WORLD + 1][FUZZ_MAX_WORLD];

typedef struct init_job {
  int world, rank;
} init_job_t;

static void *init_rank(void *arg) {
  const init_job_t *job = arg;
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = job->rank;
  config.world_size = job->world;
  config.host_group = 7000 + job->world;
  config.heap_bytes = 1 << 20;
  FUZZ_CHECK(sy_comm_init(&comms[job->world][job->rank], &config) == SY_SUCCESS);
  return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  setenv("SY_DEBUG", "NONE", 1); /* rejections are expected by the thousand: no log lines */
  for (int W = 1; W <= FUZZ_MAX_WORLD; W++) {
    pthread_t threads[FUZZ_MAX_WORLD];
    init_job_t jobs[FUZZ_MAX_WORLD];
    for (int r = 0; r < W; r++) {
      jobs[r] = (init_job_t){W, r};
      FUZZ_CHECK(pthread_create(&threads[r], NULL, init_rank, &jobs[r]) == 0);
    }
    for (int r = 0; r < W; r++) pthread_join(threads[r], NULL);
  }
  return 0;
}

/* Every rank's plan of desc; each must succeed exactly when valid, and a rejection leaves no plan. */
static void create_plans(const sy_attn_plan_desc_t *desc, int valid) {
  const int W = desc->world_size;
  sy_attn_plan_t plans[FUZZ_MAX_WORLD];
  for (int r = 0; r < W; r++) {
    plans[r] = (sy_attn_plan_t)&plans; /* not NULL: a rejection must clear it */
    const sy_status_t st = sy_attn_plan_create(comms[W][r], desc, &plans[r]);
    if (!valid) FUZZ_CHECK(st == SY_ERR_INVALID_ARG && plans[r] == NULL);
    else FUZZ_CHECK(st == SY_SUCCESS && plans[r] != NULL);
  }
  if (valid) fuzz_check_plans(desc, plans);
  for (int r = 0; r < W; r++) sy_attn_plan_destroy(valid ? plans[r] : NULL);
}

/* ---- a plan description --------------------------------------------------------------------------------- */

static void fuzz_plan(bytes_t *b) {
  const int W = 1 + (int)(next8(b) % FUZZ_MAX_WORLD);
  int C = (int)(next8(b) % (unsigned)(W + 1));
  const unsigned flaws = next8(b); /* bits: 1 wrong num_tokens, 2 a negative length, 4 too many replicas */
  const int max_len = 1 + (int)(next8(b) % 64);
  int num_seqs[FUZZ_MAX_WORLD];
  int64_t num_tokens[FUZZ_MAX_WORLD], *lens[FUZZ_MAX_WORLD];
  int *q[FUZZ_MAX_WORLD], *kv[FUZZ_MAX_WORLD];
  if (flaws & 4 && flaws >= 0xf0) C = W + 1;
  int valid = C <= W;
  for (int r = 0; r < W; r++) {
    const int n = num_seqs[r] = (int)(next8(b) % 13);
    lens[r] = calloc((size_t)n + 1, sizeof *lens[r]);
    q[r] = calloc((size_t)n + 1, sizeof *q[r]);
    kv[r] = calloc((size_t)n * (size_t)C + 1, sizeof *kv[r]);
    num_tokens[r] = 0;
    for (int i = 0; i < n; i++) {
      lens[r][i] = (int64_t)(next8(b) % (unsigned)(max_len + 1)); /* 0 too: an empty sequence moves nothing */
      num_tokens[r] += lens[r][i];
      q[r][i] = next_rank(b, W);
      valid &= q[r][i] >= -1 && q[r][i] < W;
      for (int c = 0; c < C; c++) {
        const int d = kv[r][(size_t)i * C + c] = next_rank(b, W);
        valid &= d >= -1 && d < W;
        for (int c2 = 0; c2 < c && d >= 0; c2++) valid &= kv[r][(size_t)i * C + c2] != d; /* listed twice */
      }
    }
  }
  const int flawed_rank = (int)(next8(b) % (unsigned)W);
  if (flaws & 1 && flaws >= 0xf0) num_tokens[flawed_rank] += 1 + (int64_t)(flaws % 3), valid = 0;
  if (flaws & 2 && flaws >= 0xf0 && num_seqs[flawed_rank] > 0) {
    lens[flawed_rank][0] = -1 - lens[flawed_rank][0]; /* negative even where it was 0; num_tokens keeps the sum */
    valid = 0;
  }
  sy_attn_plan_desc_t desc = SY_ATTN_PLAN_DESC_INIT;
  desc.world_size = W;
  desc.max_replicas = C;
  desc.num_seqs = num_seqs;
  desc.num_tokens = num_tokens;
  desc.seq_lens = (const int64_t *const *)lens;
  desc.q_dst = (const int *const *)q;
  desc.kv_dst = C == 0 && next8(b) % 2 ? NULL : (const int *const *)kv; /* optional without replicas */
  create_plans(&desc, valid);
  for (int r = 0; r < W; r++) free(lens[r]), free(q[r]), free(kv[r]);
}

/* ---- a placement input ---------------------------------------------------------------------------------- */

static void fuzz_place(bytes_t *b) {
  const int W = 1 + (int)(next8(b) % FUZZ_MAX_WORLD);
  const unsigned flaws = next8(b); /* bits: 1 a negative length, 2 a negative count, 4 negative tolerance, 8 limit */
  const int bits = (int)(next8(b) % 21);
  sy_attn_place_desc_t desc = SY_ATTN_PLACE_DESC_INIT;
  const unsigned t = next8(b);
  desc.world_size = W;
  desc.tolerance = t < 64 ? 0 : (double)(t - 64) / 384.0; /* 0 (the default, 0.10) or up to 0.5 */
  desc.max_shards_per_doc = (int)(next8(b) % 6);          /* 0: the default, 2 x world */
  desc.q_row_bytes = (size_t)next8(b) * 64;
  desc.kv_row_bytes = (size_t)next8(b) * 64;
  int num_docs[FUZZ_MAX_WORLD];
  int64_t *lens[FUZZ_MAX_WORLD];
  for (int r = 0; r < W; r++) {
    const int n = num_docs[r] = (int)(next8(b) % 9);
    lens[r] = calloc((size_t)n + 1, sizeof *lens[r]);
    for (int j = 0; j < n; j++) lens[r][j] = (int64_t)(next32(b) & ((1u << bits) - 1)); /* 0: an empty document */
  }
  int valid = 1;
  const int flawed_rank = (int)(next8(b) % (unsigned)W);
  if (flaws >= 0xf0) {
    if (flaws & 1 && num_docs[flawed_rank] > 0) lens[flawed_rank][0] = -1 - lens[flawed_rank][0], valid = 0;
    if (flaws & 2) num_docs[flawed_rank] = -1 - (int)(flaws % 3), valid = 0;
    if (flaws & 4) desc.tolerance = -0.25, valid = 0;
    if (flaws & 8) desc.max_shards_per_doc = -1, valid = 0;
  }
  desc.num_docs = num_docs;
  desc.doc_lens = (const int64_t *const *)lens;
  sy_attn_placement_t placement = (sy_attn_placement_t)&placement; /* not NULL: a rejection must clear it */
  const sy_status_t st = sy_attn_place(&desc, &placement);
  if (!valid) {
    FUZZ_CHECK(st == SY_ERR_INVALID_ARG);
    FUZZ_CHECK(placement == (sy_attn_placement_t)&placement || placement == NULL); /* no result */
  } else {
    FUZZ_CHECK(st == SY_SUCCESS && placement != NULL);
    fuzz_check_placement(&desc, placement);
    sy_attn_plan_desc_t plan_desc;
    FUZZ_CHECK(sy_attn_placement_desc(placement, &plan_desc) == SY_SUCCESS);
    create_plans(&plan_desc, 1);
    FUZZ_CHECK(sy_attn_placement_destroy(placement) == SY_SUCCESS);
  }
  for (int r = 0; r < W; r++) free(lens[r]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  bytes_t b = {data, size};
  if (next8(&b) % 2) fuzz_place(&b);
  else fuzz_plan(&b);
  return 0;
}
