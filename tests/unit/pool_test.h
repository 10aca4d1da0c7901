/*
 * pool_test.h — what test_pool.c and test_host_pool.c share: rank threads on host communicators, the stats
 * readers and their exact checks, payload patterns, a seeded generator (SY_TEST_SEED), the log read back.
 */
#ifndef SY_TEST_POOL_TEST_H
#define SY_TEST_POOL_TEST_H

#include "host_comm_test.h"

#include <stddef.h>

/* The test asks for more memory than exists and wants NULL back, not the sanitizer's report. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }

#define SHORT_TIMEOUT_MS 100
#define ROUND256(n)      (((size_t)(n) + 255) / 256 * 256)

/* The call must be rejected as invalid, with a log line containing needle. */
#define REJECT(call, needle) CHECK_REJECTED(call, needle)

static int next_group = 7100;

/* Runs fn on `world` rank threads, each with its own host communicator of timeout timeout_ms (0: long). */
static inline void run_world(int world, uint64_t timeout_ms, rank_fn_t fn, void *user) {
  run_shared_t run = make_run(world, __atomic_fetch_add(&next_group, 1, __ATOMIC_RELAXED), fn);
  for (int r = 0; r < world; r++) run.timeout_ms[r] = timeout_ms;
  run.user = user;
  run_ranks(&run);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t rng_next(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

static inline sy_pool_stats_t pool_stats(sy_pool_t pool) {
  sy_pool_stats_t s = SY_POOL_STATS_INIT;
  CHECK_OK(sy_pool_stats(pool, &s));
  return s;
}

static inline sy_host_pool_stats_t host_stats(sy_host_pool_t pool) {
  sy_host_pool_stats_t s = SY_HOST_POOL_STATS_INIT;
  CHECK_OK(sy_host_pool_stats(pool, &s));
  return s;
}

/* Returns the stats after checking the counts that are exact: free slots, acquires, waits. */
static inline sy_host_pool_stats_t check_host_counts(sy_host_pool_t pool, int free_slots, uint64_t acquires,
                                                     uint64_t waits) {
  sy_host_pool_stats_t s = host_stats(pool);
  CHECK_EQ_INT(s.size, sizeof s);
  CHECK_EQ_INT(s.free_slots, free_slots);
  CHECK_EQ_INT(s.acquires, acquires);
  CHECK_EQ_INT(s.waits, waits);
  return s;
}

static inline void check_pool_counts(sy_pool_t pool, size_t used, size_t used_high, uint64_t allocs, uint64_t frees) {
  sy_pool_stats_t s = pool_stats(pool);
  CHECK_EQ_INT(s.size, sizeof s);
  CHECK_EQ_INT(s.used, used);
  CHECK_EQ_INT(s.reserved, used); /* the host backend gives memory back at free */
  CHECK_EQ_INT(s.used_high, used_high);
  CHECK_EQ_INT(s.reserved_high, used_high);
  CHECK_EQ_INT(s.allocs, allocs);
  CHECK_EQ_INT(s.frees, frees);
  CHECK_EQ_INT(s.live, allocs - frees);
}

static inline void fill(unsigned char *p, size_t n, int round) {
  for (size_t k = 0; k < n; k++) p[k] = pattern(7, round, k);
}

static inline size_t count_wrong(const unsigned char *p, size_t n, int round) {
  size_t wrong = 0;
  for (size_t k = 0; k < n; k++) wrong += p[k] != pattern(7, round, k);
  return wrong;
}

/* The library's warnings to dir/log.txt (dir: a mkdtemp template), where check_log_has reads them; the seed. */
static inline void pool_test_begin(char *dir) {
  const char *env = getenv("SY_TEST_SEED");
  if (env) rng_state = strtoull(env, NULL, 0) | 1;
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();
}

static inline int pool_test_end(const char *dir) {
  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  return check_report();
}

#endif
