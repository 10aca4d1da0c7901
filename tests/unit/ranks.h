/*
 * ranks.h — what the host-backend CPU tests share: ranks as threads, each with its own communicator of a
 * fresh host group, and the seed of their random inputs (the numbers and inputs are tests/workload's). A test
 * sets TEST_SEED_DEFAULT before including; SY_TEST_SEED overrides it at run time (seed_from_env).
 */
#ifndef SY_TEST_RANKS_H
#define SY_TEST_RANKS_H

#include "check.h"
#include "switchyard.h"
#include "workload.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef TEST_SEED_DEFAULT
#define TEST_SEED_DEFAULT 0x5eed5eedull
#endif
#define MAX_RANKS       8
#define TEST_TIMEOUT_MS 60000 /* generous: a loaded 2-core CI machine must not trip it */

static uint64_t seed = TEST_SEED_DEFAULT;

static inline void seed_from_env(void) {
  const char *env = getenv("SY_TEST_SEED");
  if (env) seed = strtoull(env, NULL, 0);
}

typedef void (*rank_fn_t)(int rank, sy_comm_t comm, void *arg);

typedef struct rank_ctx {
  int rank, world, group;
  uint64_t timeout_ms;
  rank_fn_t fn;
  void *arg;
  pthread_t thread;
  size_t heap_bytes; /* 0: 4 GiB */
} rank_ctx_t;

static int next_group = 4100;

static inline void *rank_main(void *p) {
  rank_ctx_t *ctx = (rank_ctx_t *)p;
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = ctx->rank;
  config.world_size = ctx->world;
  config.host_group = ctx->group;
  config.timeout_ms = ctx->timeout_ms;
  config.heap_bytes = ctx->heap_bytes ? ctx->heap_bytes : (size_t)1 << 32; /* accounting only on the host backend */
  sy_comm_t comm = NULL;
  CHECK_OK(sy_comm_init(&comm, &config));
  if (!comm) return NULL;
  ctx->fn(ctx->rank, comm, ctx->arg);
  CHECK_OK(sy_comm_destroy(comm));
  return NULL;
}

/* Runs fn on `world` ranks, each a thread with its own communicator of a fresh host group; heaps: each rank's
 * symmetric heap in bytes (NULL: 4 GiB each). */
static inline void run_ranks_heaps(int world, uint64_t timeout_ms, const size_t *heaps, rank_fn_t fn, void *arg) {
  rank_ctx_t ctx[MAX_RANKS];
  const int group = __atomic_fetch_add(&next_group, 1, __ATOMIC_RELAXED);
  for (int r = 0; r < world; r++) {
    ctx[r] = (rank_ctx_t){r, world, group, timeout_ms, fn, arg, 0, heaps ? heaps[r] : 0};
    if (pthread_create(&ctx[r].thread, NULL, rank_main, &ctx[r])) {
      fprintf(stderr, "pthread_create failed\n");
      exit(1);
    }
  }
  for (int r = 0; r < world; r++) pthread_join(ctx[r].thread, NULL);
}

static inline void run_ranks_timeout(int world, uint64_t timeout_ms, rank_fn_t fn, void *arg) {
  run_ranks_heaps(world, timeout_ms, NULL, fn, arg);
}

static inline void run_ranks(int world, rank_fn_t fn, void *arg) { run_ranks_timeout(world, TEST_TIMEOUT_MS, fn, arg); }

#endif
