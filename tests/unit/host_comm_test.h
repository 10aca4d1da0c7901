/*
 * host_comm_test.h — what the host backend's communicator tests (test_host_comm.c, test_host_comm_mem.c)
 * share: ranks as threads, each building its own communicator of a host group as a user would (a timeout per
 * rank, a heap size, scratch counters the ranks share), the clock, and a payload pattern that is never zero.
 */
#ifndef SY_TEST_HOST_COMM_TEST_H
#define SY_TEST_HOST_COMM_TEST_H

#include "check.h"
#include "core/internal.h"
#include "switchyard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS       8
#define LONG_TIMEOUT_MS 30000 /* generous: a loaded 2-core CI machine must not trip it */

/* ---- rank threads ----------------------------------------------------------------------------------- */

typedef struct rank_ctx rank_ctx_t;
typedef void (*rank_fn_t)(rank_ctx_t *ctx);

typedef struct run_shared {
  int world, group;
  size_t heap_bytes;
  uint64_t timeout_ms[MAX_RANKS]; /* 0: LONG_TIMEOUT_MS */
  rank_fn_t fn;
  void *user;
  int counter; /* test scratch, atomic */
  int flag;    /* test scratch, atomic */
} run_shared_t;

struct rank_ctx {
  int rank;
  run_shared_t *run;
  sy_comm_t comm;
  pthread_t thread;
};

static inline uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static inline sy_comm_config_t make_config(int rank, int world, int group, uint64_t timeout_ms) {
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = rank;
  config.world_size = world;
  config.host_group = group;
  config.timeout_ms = timeout_ms;
  return config;
}

static inline void *rank_main(void *arg) {
  rank_ctx_t *ctx = arg;
  run_shared_t *run = ctx->run;
  sy_comm_config_t config = make_config(ctx->rank, run->world, run->group,
                                        run->timeout_ms[ctx->rank] ? run->timeout_ms[ctx->rank] : LONG_TIMEOUT_MS);
  config.heap_bytes = run->heap_bytes;
  CHECK_OK(sy_comm_init(&ctx->comm, &config));
  if (!ctx->comm) return NULL;
  run->fn(ctx);
  uint64_t t0 = now_ms();
  CHECK_OK(sy_comm_destroy(ctx->comm));
  CHECK(now_ms() - t0 < 5000); /* destroy never waits for peers */
  return NULL;
}

static inline void spawn_ranks(run_shared_t *run, rank_ctx_t *ctx) {
  for (int r = 0; r < run->world; r++) {
    ctx[r].rank = r;
    ctx[r].run = run;
    ctx[r].comm = NULL;
    CHECK_EQ_INT(pthread_create(&ctx[r].thread, NULL, rank_main, &ctx[r]), 0);
  }
}

static inline void join_ranks(run_shared_t *run, rank_ctx_t *ctx) {
  for (int r = 0; r < run->world; r++) pthread_join(ctx[r].thread, NULL);
}

static inline void run_ranks(run_shared_t *run) {
  rank_ctx_t ctx[MAX_RANKS];
  spawn_ranks(run, ctx);
  join_ranks(run, ctx);
}

static inline run_shared_t make_run(int world, int group, rank_fn_t fn) {
  run_shared_t run;
  memset(&run, 0, sizeof run);
  run.world = world;
  run.group = group;
  run.fn = fn;
  return run;
}

static inline unsigned char pattern(int rank, int round, size_t k) {
  uint32_t h = (uint32_t)rank * 2654435761u ^ (uint32_t)round * 40503u ^ (uint32_t)k * 2246822519u;
  h ^= h >> 15;
  return (unsigned char)(h % 255 + 1); /* never zero */
}

#endif
