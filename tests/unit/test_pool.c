/*
 * test_pool.c — the orchestration pools on the host backend (src/mem/pool.c, src/mem/host_pool.c; the API at
 * the end of switchyard.h):
 *   sy_pool       create with and without a config; every bad argument rejected with a line naming it and the
 *                 pool's stats unchanged; 256-byte aligned, writable, disjoint allocations; the stats exact after
 *                 a sequence (the host backend rounds to 256 bytes, reserved = used); 10,000 live allocations
 *                 freed in random order and a long churn (the live table's growth, rehash and tombstones);
 *                 destroy with allocations still live frees them and warns.
 *   sy_host_pool  bad configs; every slot acquired, distinct and writable; a full pool times out within the
 *                 communicator's timeout and counts the wait; releases of foreign, interior, past-the-end and
 *                 released slots refused; a second thread blocked in acquire gets exactly the slot given back;
 *                 hundreds of cycles through 3 slots, never one handed out twice; destroy with slots held.
 *   sticky error  after a recorded mismatch, alloc, acquire and create return it; free, release, stats and
 *                 destroy still answer.
 * The log goes to a file in a scratch directory so the test can read what each rejection named.
 */
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
#define REJECT(call, needle)                \
  do {                                      \
    CHECK_STATUS(call, SY_ERR_INVALID_ARG); \
    CHECK(check_log_has(needle, __LINE__)); \
  } while (0)

static int next_group = 7100;

/* Runs fn on `world` rank threads, each with its own host communicator of timeout timeout_ms (0: long). */
static void run_world(int world, uint64_t timeout_ms, rank_fn_t fn, void *user) {
  run_shared_t run = make_run(world, __atomic_fetch_add(&next_group, 1, __ATOMIC_RELAXED), fn);
  for (int r = 0; r < world; r++) run.timeout_ms[r] = timeout_ms;
  run.user = user;
  run_ranks(&run);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

static sy_pool_stats_t pool_stats(sy_pool_t pool) {
  sy_pool_stats_t s = SY_POOL_STATS_INIT;
  CHECK_OK(sy_pool_stats(pool, &s));
  return s;
}

static sy_host_pool_stats_t host_stats(sy_host_pool_t pool) {
  sy_host_pool_stats_t s = SY_HOST_POOL_STATS_INIT;
  CHECK_OK(sy_host_pool_stats(pool, &s));
  return s;
}

/* Returns the stats after checking the counts that are exact: free slots, acquires, waits. */
static sy_host_pool_stats_t check_host_counts(sy_host_pool_t pool, int free_slots, uint64_t acquires, uint64_t waits) {
  sy_host_pool_stats_t s = host_stats(pool);
  CHECK_EQ_INT(s.size, sizeof s);
  CHECK_EQ_INT(s.free_slots, free_slots);
  CHECK_EQ_INT(s.acquires, acquires);
  CHECK_EQ_INT(s.waits, waits);
  return s;
}

static void check_pool_counts(sy_pool_t pool, size_t used, size_t used_high, uint64_t allocs, uint64_t frees) {
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

static void fill(unsigned char *p, size_t n, int round) {
  for (size_t k = 0; k < n; k++) p[k] = pattern(7, round, k);
}

static size_t count_wrong(const unsigned char *p, size_t n, int round) {
  size_t wrong = 0;
  for (size_t k = 0; k < n; k++) wrong += p[k] != pattern(7, round, k);
  return wrong;
}

/* ---- sy_pool: create and bad arguments ---------------------------------------------------------------- */

static void fn_pool_create(rank_ctx_t *ctx) {
  sy_pool_t pool = (sy_pool_t)ctx; /* must be cleared by a rejection */
  sy_pool_config_t config = SY_POOL_CONFIG_INIT;
  CHECK_EQ_INT(config.size, sizeof config);
  CHECK(config.release_threshold == SIZE_MAX);
  REJECT(sy_pool_create(NULL, &config, &pool), "comm is NULL");
  REJECT(sy_pool_create(ctx->comm, &config, NULL), "pool is NULL");
  config.size = 0;
  REJECT(sy_pool_create(ctx->comm, &config, &pool), "config->size=0");
  CHECK(pool == NULL);
  config.size = sizeof config + 8;
  REJECT(sy_pool_create(ctx->comm, &config, &pool), "SY_POOL_CONFIG_INIT");

  CHECK_OK(sy_pool_create(ctx->comm, NULL, &pool));
  CHECK(pool != NULL);
  check_pool_counts(pool, 0, 0, 0, 0);
  CHECK_OK(sy_pool_destroy(pool));
  sy_pool_config_t init = SY_POOL_CONFIG_INIT, zero = SY_POOL_CONFIG_INIT, old = SY_POOL_CONFIG_INIT;
  zero.release_threshold = 0;
  old.size = sizeof(size_t); /* an older config without release_threshold: its default */
  const sy_pool_config_t *configs[] = {&init, &zero, &old};
  for (size_t i = 0; i < 3; i++) {
    pool = NULL;
    CHECK_OK(sy_pool_create(ctx->comm, configs[i], &pool));
    void *p = NULL;
    CHECK_OK(sy_pool_alloc(pool, 100, &p, NULL));
    CHECK_OK(sy_pool_free(pool, p, NULL));
    check_pool_counts(pool, 0, 256, 1, 1);
    CHECK_OK(sy_pool_trim(pool, 0));
    CHECK_OK(sy_pool_destroy(pool));
  }
  CHECK_OK(sy_pool_destroy(NULL));
}

/* Every rejection leaves the pool as it was: stats equal, the allocation still live and intact. */
static void fn_pool_args(rank_ctx_t *ctx) {
  sy_pool_t pool = NULL;
  CHECK_OK(sy_pool_create(ctx->comm, NULL, &pool));
  if (!pool) return;
  unsigned char *a = NULL;
  CHECK_OK(sy_pool_alloc(pool, 512, (void **)&a, NULL));
  if (!a) return;
  fill(a, 512, 1);
  const sy_pool_stats_t before = pool_stats(pool);

  void *p = (void *)&before; /* sentinel: a rejected alloc leaves *ptr alone */
  REJECT(sy_pool_alloc(NULL, 64, &p, NULL), "pool is NULL");
  REJECT(sy_pool_alloc(pool, 64, NULL, NULL), "ptr is NULL");
  REJECT(sy_pool_alloc(pool, 0, &p, NULL), "bytes is 0");
  REJECT(sy_pool_alloc(pool, SIZE_MAX, &p, NULL), "too large");
  REJECT(sy_pool_alloc(pool, SIZE_MAX - 254, &p, NULL), "too large");
  CHECK(p == (void *)&before);
  /* Allowed, but no memory has room for it: SY_ERR_NO_MEMORY, nothing allocated. */
  CHECK_STATUS(sy_pool_alloc(pool, SIZE_MAX - 256, &p, NULL), SY_ERR_NO_MEMORY);
  CHECK(p == (void *)&before);

  unsigned char local[512];
  REJECT(sy_pool_free(NULL, a, NULL), "pool is NULL");
  REJECT(sy_pool_free(pool, NULL, NULL), "not a live allocation");
  REJECT(sy_pool_free(pool, local, NULL), "not a live allocation"); /* never given out */
  REJECT(sy_pool_free(pool, a + 1, NULL), "not a live allocation"); /* interior */
  REJECT(sy_pool_free(pool, a + 256, NULL), "not a live allocation");
  REJECT(sy_pool_free(pool, a + 512, NULL), "not a live allocation"); /* one past the end */

  sy_pool_stats_t s = SY_POOL_STATS_INIT;
  REJECT(sy_pool_stats(NULL, &s), "pool is NULL");
  REJECT(sy_pool_stats(pool, NULL), "stats is NULL");
  s.size = 0;
  REJECT(sy_pool_stats(pool, &s), "stats->size=0");
  s.size = sizeof s + 1;
  REJECT(sy_pool_stats(pool, &s), "SY_POOL_STATS_INIT");
  CHECK_EQ_INT(s.size, sizeof s + 1);
  CHECK_EQ_INT(s.allocs, 0); /* untouched */
  REJECT(sy_pool_trim(NULL, 0), "pool is NULL");

  const sy_pool_stats_t after = pool_stats(pool);
  CHECK(memcmp(&before, &after, sizeof before) == 0);
  CHECK_EQ_INT(count_wrong(a, 512, 1), 0);

  /* An older, shorter stats struct: only its fields are written. */
  sy_pool_stats_t old;
  memset(&old, 0xAB, sizeof old);
  old.size = offsetof(sy_pool_stats_t, reserved_high);
  CHECK_OK(sy_pool_stats(pool, &old));
  CHECK_EQ_INT(old.size, offsetof(sy_pool_stats_t, reserved_high));
  CHECK_EQ_INT(old.used, 512);
  CHECK_EQ_INT(old.reserved, 512);
  CHECK(old.allocs == 0xABABABABABABABABull && old.live == 0xABABABABABABABABull);

  CHECK_OK(sy_pool_free(pool, a, NULL));
  REJECT(sy_pool_free(pool, a, NULL), "not a live allocation"); /* double free */
  check_pool_counts(pool, 0, 512, 1, 1);
  CHECK_OK(sy_pool_trim(pool, 0));
  CHECK_OK(sy_pool_trim(pool, SIZE_MAX));
  CHECK_OK(sy_pool_destroy(pool));
}

/* ---- sy_pool: stats, alignment, many allocations, destroy ------------------------------------------------ */

#define SEQ_N 8

/* Runs on world 1 and 3: each rank's pool is its own (not collective). */
static void fn_pool_stats(rank_ctx_t *ctx) {
  static const size_t sizes[SEQ_N] = {1, 255, 256, 257, 1000, 4096, 100000, 3};
  sy_pool_t pool = NULL;
  CHECK_OK(sy_pool_create(ctx->comm, NULL, &pool));
  if (!pool) return;
  unsigned char *p[SEQ_N] = {0};
  size_t used = 0, high = 0;
  for (int i = 0; i < SEQ_N; i++) {
    CHECK_OK(sy_pool_alloc(pool, sizes[i], (void **)&p[i], NULL));
    if (!p[i]) return;
    CHECK_EQ_INT((uintptr_t)p[i] & 255, 0);
    fill(p[i], sizes[i], 100 * ctx->rank + i);
    used += ROUND256(sizes[i]);
    high = used;
    check_pool_counts(pool, used, high, (uint64_t)i + 1, 0);
  }
  for (int i = 0; i < SEQ_N; i++) CHECK_EQ_INT(count_wrong(p[i], sizes[i], 100 * ctx->rank + i), 0); /* disjoint */
  CHECK_EQ_INT(high, 256 + 256 + 256 + 512 + 1024 + 4096 + 100096 + 256);

  /* Frees lower used, not the high-water mark; a new allocation below the mark leaves it. */
  CHECK_OK(sy_pool_free(pool, p[6], NULL));
  used -= ROUND256(sizes[6]);
  CHECK_OK(sy_pool_free(pool, p[0], NULL));
  used -= ROUND256(sizes[0]);
  check_pool_counts(pool, used, high, SEQ_N, 2);
  CHECK_OK(sy_pool_alloc(pool, 50000, (void **)&p[6], NULL));
  used += ROUND256(50000);
  check_pool_counts(pool, used, high, SEQ_N + 1, 2);
  CHECK_OK(sy_pool_alloc(pool, 200000, (void **)&p[0], NULL));
  used += ROUND256(200000);
  high = used;
  check_pool_counts(pool, used, high, SEQ_N + 2, 2);
  CHECK_OK(sy_pool_trim(pool, 0));
  check_pool_counts(pool, used, high, SEQ_N + 2, 2); /* nothing to trim: every byte is live */
  for (int i = 0; i < SEQ_N; i++) CHECK_OK(sy_pool_free(pool, p[i], NULL));
  check_pool_counts(pool, 0, high, SEQ_N + 2, SEQ_N + 2);
  CHECK_OK(sy_pool_destroy(pool));
}

#define MANY      10000
#define CHURN_OPS 60000

typedef struct many_entry {
  unsigned char *ptr;
  size_t bytes;
  uint32_t tag;
} many_entry_t;

static void check_many_entry(const many_entry_t *e) {
  uint32_t tag = 0;
  memcpy(&tag, e->ptr, sizeof tag);
  CHECK_EQ_INT(tag, e->tag);
  CHECK_EQ_INT(e->ptr[e->bytes - 1], (unsigned char)e->tag);
}

/* Frees entries [0, n) of e in place: returns the bytes freed (as rounded). */
static size_t free_entries(sy_pool_t pool, many_entry_t *e, size_t n) {
  size_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    check_many_entry(&e[i]);
    CHECK_OK(sy_pool_free(pool, e[i].ptr, NULL));
    bytes += ROUND256(e[i].bytes);
  }
  return bytes;
}

/* 10,000 live at once, freed in random order; then a churn around ~64 live (rehashes among tombstones). */
static void fn_pool_many(rank_ctx_t *ctx) {
  sy_pool_t pool = NULL;
  many_entry_t *e = calloc(MANY, sizeof *e);
  CHECK_OK(sy_pool_create(ctx->comm, NULL, &pool));
  if (!pool || !e) return;
  size_t used = 0;
  int misaligned = 0;
  for (uint32_t i = 0; i < MANY; i++) {
    e[i].bytes = 5 + rng_next() % 3000; /* past the tag */
    e[i].tag = 0x5a000000u + i;
    CHECK_OK(sy_pool_alloc(pool, e[i].bytes, (void **)&e[i].ptr, NULL));
    if (!e[i].ptr) return;
    misaligned += ((uintptr_t)e[i].ptr & 255) != 0;
    memcpy(e[i].ptr, &e[i].tag, sizeof e[i].tag);
    e[i].ptr[e[i].bytes - 1] = (unsigned char)e[i].tag;
    used += ROUND256(e[i].bytes);
  }
  CHECK_EQ_INT(misaligned, 0);
  check_pool_counts(pool, used, used, MANY, 0);
  for (size_t i = MANY - 1; i > 0; i--) { /* Fisher-Yates */
    size_t j = rng_next() % (i + 1);
    many_entry_t t = e[i];
    e[i] = e[j], e[j] = t;
  }
  const size_t high = used;
  used -= free_entries(pool, e, MANY / 2);
  check_pool_counts(pool, used, high, MANY, MANY / 2);
  CHECK_STATUS(sy_pool_free(pool, e[0].ptr, NULL), SY_ERR_INVALID_ARG); /* freed: found as a tombstone */
  /* Interior pointers of a live one (not 256-aligned: never another allocation's start). */
  CHECK_STATUS(sy_pool_free(pool, e[MANY - 1].ptr + 1, NULL), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy_pool_free(pool, e[MANY - 1].ptr + 128, NULL), SY_ERR_INVALID_ARG);
  used -= free_entries(pool, e + MANY / 2, MANY - MANY / 2);
  check_pool_counts(pool, 0, high, MANY, MANY);
  for (size_t i = 0; i < MANY; i += 97) CHECK_STATUS(sy_pool_free(pool, e[i].ptr, NULL), SY_ERR_INVALID_ARG);
  /* the table's own marker for an erased entry is never taken for an allocation */
  CHECK_STATUS(sy_pool_free(pool, (void *)1, NULL), SY_ERR_INVALID_ARG);

  /* The churn: a small live set over a table full of tombstones; every free must find its pointer. */
  size_t live = 0;
  uint64_t allocs = MANY, frees = MANY;
  for (int op = 0; op < CHURN_OPS; op++) {
    if (live < 64 && (live == 0 || rng_next() % 2)) {
      many_entry_t *n = &e[live++];
      n->bytes = 5 + rng_next() % 600;
      n->tag = 0xc0000000u + (uint32_t)op;
      CHECK_OK(sy_pool_alloc(pool, n->bytes, (void **)&n->ptr, NULL));
      if (!n->ptr) return;
      memcpy(n->ptr, &n->tag, sizeof n->tag);
      n->ptr[n->bytes - 1] = (unsigned char)n->tag;
      used += ROUND256(n->bytes);
      allocs++;
    } else {
      size_t j = rng_next() % live;
      used -= free_entries(pool, &e[j], 1);
      e[j] = e[--live];
      frees++;
    }
  }
  check_pool_counts(pool, used, high, allocs, frees);
  used -= free_entries(pool, e, live);
  check_pool_counts(pool, 0, high, allocs, allocs);
  CHECK_OK(sy_pool_destroy(pool));
  free(e);
}

/* Destroy frees what is still live (a leak would show under the address sanitizer) and says how many. */
static void fn_pool_destroy_live(rank_ctx_t *ctx) {
  sy_pool_t pool = NULL;
  CHECK_OK(sy_pool_create(ctx->comm, NULL, &pool));
  if (!pool) return;
  void *p[5] = {0};
  for (int i = 0; i < 5; i++) CHECK_OK(sy_pool_alloc(pool, (size_t)(i + 1) * 1000, &p[i], NULL));
  CHECK_OK(sy_pool_free(pool, p[1], NULL));
  CHECK_OK(sy_pool_free(pool, p[3], NULL));
  check_pool_counts(pool, 1024 + 3072 + 5120, 1024 + 2048 + 3072 + 4096 + 5120, 5, 2);
  CHECK(check_log_has("", __LINE__)); /* skip what came before */
  CHECK_OK(sy_pool_destroy(pool));
  CHECK(check_log_has("3 allocations were not freed", __LINE__));
}

/* ---- sy_host_pool: config, slots, timeout, releases ------------------------------------------------------ */

static void fn_host_pool_config(rank_ctx_t *ctx) {
  sy_host_pool_t pool = (sy_host_pool_t)ctx; /* must be cleared by a rejection */
  sy_host_pool_config_t c = SY_HOST_POOL_CONFIG_INIT;
  CHECK_EQ_INT(c.size, sizeof c);
  CHECK_EQ_INT(c.slots, 4);
  REJECT(sy_host_pool_create(ctx->comm, NULL, &pool), "config is NULL");
  CHECK(pool == NULL);
  REJECT(sy_host_pool_create(ctx->comm, &c, &pool), "config->slot_bytes is 0");
  c.slot_bytes = 64;
  REJECT(sy_host_pool_create(NULL, &c, &pool), "comm is NULL");
  REJECT(sy_host_pool_create(ctx->comm, &c, NULL), "pool is NULL");
  static const int bad_slots[] = {0, 1025, -1};
  for (int i = 0; i < 3; i++) {
    c.slots = bad_slots[i];
    REJECT(sy_host_pool_create(ctx->comm, &c, &pool), "config->slots=");
    CHECK(pool == NULL);
  }
  c.slots = 2;
  c.slot_bytes = SIZE_MAX / 2;
  REJECT(sy_host_pool_create(ctx->comm, &c, &pool), "overflows");
  c.slot_bytes = 64;
  c.size = 0;
  REJECT(sy_host_pool_create(ctx->comm, &c, &pool), "config->size=0");

  /* The bounds themselves; an older config without `slots` gets the default 4. */
  const int good_slots[] = {1, 1024};
  for (int i = 0; i < 2; i++) {
    sy_host_pool_config_t g = SY_HOST_POOL_CONFIG_INIT;
    g.slot_bytes = 1;
    g.slots = good_slots[i];
    CHECK_OK(sy_host_pool_create(ctx->comm, &g, &pool));
    if (!pool) continue;
    sy_host_pool_stats_t s = host_stats(pool);
    CHECK_EQ_INT(s.slots, good_slots[i]);
    CHECK_EQ_INT(s.free_slots, good_slots[i]);
    CHECK_OK(sy_host_pool_destroy(pool));
  }
  sy_host_pool_config_t old = SY_HOST_POOL_CONFIG_INIT;
  old.slot_bytes = 10;
  old.slots = 99; /* beyond size: ignored */
  old.size = offsetof(sy_host_pool_config_t, slots);
  CHECK_OK(sy_host_pool_create(ctx->comm, &old, &pool));
  if (pool) CHECK_EQ_INT(host_stats(pool).slots, 4);

  void *slot = (void *)&c;
  REJECT(sy_host_pool_acquire(NULL, &slot), "pool is NULL");
  REJECT(sy_host_pool_acquire(pool, NULL), "slot is NULL");
  REJECT(sy_host_pool_release(NULL, slot, NULL), "pool is NULL");
  sy_host_pool_stats_t s = SY_HOST_POOL_STATS_INIT;
  REJECT(sy_host_pool_stats(NULL, &s), "pool is NULL");
  REJECT(sy_host_pool_stats(pool, NULL), "stats is NULL");
  s.size = sizeof s + 1;
  REJECT(sy_host_pool_stats(pool, &s), "SY_HOST_POOL_STATS_INIT");
  CHECK(slot == (void *)&c);
  CHECK_OK(sy_host_pool_destroy(pool));
  CHECK_OK(sy_host_pool_destroy(NULL));
}

#define SLOTS      5
#define SLOT_BYTES 1000 /* slots 1024 bytes apart: 256 inside one is a multiple of 256, not a slot */

/* Releases that must be refused, each leaving the free count as it was. */
static void check_bad_releases(sy_host_pool_t pool, unsigned char **held, unsigned char *released) {
  const int free_before = host_stats(pool).free_slots;
  unsigned char *lo = held[0], *hi = held[0];
  for (int i = 1; i < SLOTS; i++) lo = held[i] < lo ? held[i] : lo, hi = held[i] > hi ? held[i] : hi;
  unsigned char *foreign = malloc(SLOT_BYTES);
  REJECT(sy_host_pool_release(pool, foreign, NULL), "not a slot of this pool");
  REJECT(sy_host_pool_release(pool, NULL, NULL), "not a slot of this pool");
  REJECT(sy_host_pool_release(pool, held[1] + 1, NULL), "not a slot of this pool");   /* interior */
  REJECT(sy_host_pool_release(pool, held[1] + 256, NULL), "not a slot of this pool"); /* interior, aligned */
  REJECT(sy_host_pool_release(pool, lo - 1024, NULL), "not a slot of this pool");     /* before the first */
  REJECT(sy_host_pool_release(pool, hi + 1024, NULL), "not a slot of this pool");     /* past the last */
  REJECT(sy_host_pool_release(pool, released, NULL), "released already");             /* double release */
  CHECK_EQ_INT(host_stats(pool).free_slots, free_before);
  free(foreign);
}

static void fn_host_pool_slots(rank_ctx_t *ctx) {
  sy_host_pool_config_t c = SY_HOST_POOL_CONFIG_INIT;
  c.slot_bytes = SLOT_BYTES;
  c.slots = SLOTS;
  sy_host_pool_t pool = NULL;
  CHECK_OK(sy_host_pool_create(ctx->comm, &c, &pool));
  if (!pool) return;
  unsigned char *held[SLOTS] = {0};
  for (int i = 0; i < SLOTS; i++) {
    CHECK_OK(sy_host_pool_acquire(pool, (void **)&held[i]));
    if (!held[i]) return;
    CHECK_EQ_INT((uintptr_t)held[i] & 255, 0);
    for (int j = 0; j < i; j++) CHECK(held[j] + SLOT_BYTES <= held[i] || held[i] + SLOT_BYTES <= held[j]);
    fill(held[i], SLOT_BYTES, i);
  }
  for (int i = 0; i < SLOTS; i++) CHECK_EQ_INT(count_wrong(held[i], SLOT_BYTES, i), 0);
  sy_host_pool_stats_t s = check_host_counts(pool, 0, SLOTS, 0);
  CHECK_EQ_INT(s.slots, SLOTS);
  CHECK_EQ_INT(s.wait_ns, 0);

  /* Every slot held: the acquire waits out the communicator's timeout, acquires nothing, counts the wait. */
  void *none = (void *)&c;
  const uint64_t t0 = now_ms();
  CHECK_STATUS(sy_host_pool_acquire(pool, &none), SY_ERR_TIMEOUT);
  const uint64_t waited = now_ms() - t0;
  CHECK(waited + 1 >= SHORT_TIMEOUT_MS);
  CHECK(waited < SHORT_TIMEOUT_MS + 3000);
  CHECK(none == (void *)&c);
  CHECK(check_log_has("no slot of 5 came back in 100 ms", __LINE__));
  s = check_host_counts(pool, 0, SLOTS, 1);
  CHECK(s.wait_ns >= (SHORT_TIMEOUT_MS - 1) * 1000000ull && s.wait_ns <= (waited + 1) * 1000000ull);
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL)); /* a pool's timeout is not the communicator's error */

  /* Released at once (stream NULL, or any stream on the host backend): the next acquire gets that slot. */
  CHECK_OK(sy_host_pool_release(pool, held[2], NULL));
  CHECK_EQ_INT(host_stats(pool).free_slots, 1);
  check_bad_releases(pool, held, held[2]);
  unsigned char *again = NULL;
  CHECK_OK(sy_host_pool_acquire(pool, (void **)&again));
  CHECK(again == held[2]);
  CHECK_OK(sy_host_pool_release(pool, held[4], (cudaStream_t)held));
  CHECK_EQ_INT(host_stats(pool).free_slots, 1);
  CHECK_OK(sy_host_pool_acquire(pool, (void **)&again));
  CHECK(again == held[4]);
  check_host_counts(pool, 0, SLOTS + 2, 1);
  CHECK_OK(sy_host_pool_release(pool, held[0], NULL));
  CHECK_OK(sy_host_pool_destroy(pool)); /* four slots still held by the host: freed */
}

/* ---- sy_host_pool: a second thread waits for the slot the first gives back -------------------------------- */

typedef struct handoff {
  sy_host_pool_t pool;
  void *got;
  sy_status_t status;
  uint64_t waited_ms;
  int done; /* atomic */
} handoff_t;

static void *handoff_waiter(void *arg) {
  handoff_t *h = arg;
  const uint64_t t0 = now_ms();
  h->status = sy_host_pool_acquire(h->pool, &h->got);
  h->waited_ms = now_ms() - t0;
  __atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void fn_host_pool_handoff(rank_ctx_t *ctx) {
  sy_host_pool_config_t c = SY_HOST_POOL_CONFIG_INIT;
  c.slot_bytes = 4096;
  c.slots = 3;
  handoff_t h = {0};
  CHECK_OK(sy_host_pool_create(ctx->comm, &c, &h.pool));
  if (!h.pool) return;
  void *held[3] = {0};
  for (int i = 0; i < 3; i++) CHECK_OK(sy_host_pool_acquire(h.pool, &held[i]));
  pthread_t waiter;
  CHECK_EQ_INT(pthread_create(&waiter, NULL, handoff_waiter, &h), 0);
  /* waits is counted under the lock the waiter keeps until it sleeps on the condition: once it shows, the
   * waiter is waiting (or about to, and then sees the release). */
  const uint64_t t0 = now_ms();
  while (host_stats(h.pool).waits == 0 && now_ms() - t0 < 10000) sleep_ms(1);
  CHECK_EQ_INT(host_stats(h.pool).waits, 1);
  sleep_ms(20);
  CHECK_EQ_INT(__atomic_load_n(&h.done, __ATOMIC_ACQUIRE), 0);
  CHECK_OK(sy_host_pool_release(h.pool, held[1], NULL));
  pthread_join(waiter, NULL);
  CHECK_OK(h.status);
  CHECK(h.got == held[1]);
  CHECK(h.waited_ms >= 19);
  sy_host_pool_stats_t s = check_host_counts(h.pool, 0, 4, 1);
  CHECK(s.wait_ns >= 19000000ull && s.wait_ns <= (h.waited_ms + 1) * 1000000ull);
  for (int i = 0; i < 3; i++) CHECK_OK(sy_host_pool_release(h.pool, held[i], NULL));
  CHECK_EQ_INT(host_stats(h.pool).free_slots, 3);
  CHECK_OK(sy_host_pool_destroy(h.pool));
}

/* ---- sy_host_pool: cycles through 3 slots ----------------------------------------------------------------- */

#define CYCLE_SLOTS  3
#define CYCLE_BYTES  777
#define CYCLE_ROUNDS 600

static void fn_host_pool_cycles(rank_ctx_t *ctx) {
  sy_host_pool_config_t c = SY_HOST_POOL_CONFIG_INIT;
  c.slot_bytes = CYCLE_BYTES;
  c.slots = CYCLE_SLOTS;
  sy_host_pool_t pool = NULL;
  CHECK_OK(sy_host_pool_create(ctx->comm, &c, &pool));
  if (!pool) return;
  unsigned char *held[CYCLE_SLOTS], *seen[CYCLE_SLOTS] = {0};
  int round_of[CYCLE_SLOTS], nheld = 0, nseen = 0, twice = 0, strangers = 0;
  size_t wrong = 0;
  uint64_t acquires = 0;
  for (int round = 1; round <= CYCLE_ROUNDS; round++) {
    const int acquire = nheld == 0 || (nheld < CYCLE_SLOTS && rng_next() % 3 != 0);
    if (acquire) {
      unsigned char *p = NULL;
      CHECK_OK(sy_host_pool_acquire(pool, (void **)&p));
      if (!p) return;
      for (int i = 0; i < nheld; i++) twice += held[i] == p;
      int known = 0;
      for (int i = 0; i < nseen; i++) known |= seen[i] == p;
      if (!known && nseen < CYCLE_SLOTS) seen[nseen++] = p;
      else strangers += !known;
      fill(p, CYCLE_BYTES, round);
      held[nheld] = p, round_of[nheld++] = round;
      acquires++;
    } else {
      const int j = (int)(rng_next() % (uint64_t)nheld);
      wrong += count_wrong(held[j], CYCLE_BYTES, round_of[j]);
      CHECK_OK(sy_host_pool_release(pool, held[j], round % 2 ? NULL : (cudaStream_t)pool));
      held[j] = held[nheld - 1], round_of[j] = round_of[nheld - 1], nheld--;
    }
    CHECK_EQ_INT(host_stats(pool).free_slots, CYCLE_SLOTS - nheld);
  }
  CHECK_EQ_INT(twice, 0);
  CHECK_EQ_INT(strangers, 0);
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(nseen, CYCLE_SLOTS);
  CHECK(acquires > CYCLE_ROUNDS / 3);
  check_host_counts(pool, CYCLE_SLOTS - nheld, acquires, 0);
  CHECK_OK(sy_host_pool_destroy(pool)); /* whatever is still held goes with it */
}

/* ---- after a sticky error ---------------------------------------------------------------------------------- */

/* Rank 0 enters a barrier, rank 1 an allgather: SY_ERR_MISMATCH on both, sticky. */
static void fn_sticky(rank_ctx_t *ctx) {
  sy_pool_t pool = NULL;
  sy_host_pool_t hpool = NULL;
  sy_host_pool_config_t hc = SY_HOST_POOL_CONFIG_INIT;
  hc.slot_bytes = 256;
  hc.slots = 2;
  CHECK_OK(sy_pool_create(ctx->comm, NULL, &pool));
  CHECK_OK(sy_host_pool_create(ctx->comm, &hc, &hpool));
  if (!pool || !hpool) return;
  void *p = NULL, *slot = NULL;
  CHECK_OK(sy_pool_alloc(pool, 1000, &p, NULL));
  CHECK_OK(sy_host_pool_acquire(hpool, &slot));

  uint64_t value = 1, gathered[2];
  if (ctx->rank == 0) CHECK_STATUS(sy_comm_barrier(ctx->comm, NULL), SY_ERR_MISMATCH);
  else CHECK_STATUS(sy_comm_allgather_host(ctx->comm, &value, gathered, sizeof value), SY_ERR_MISMATCH);
  sy_status_t async = SY_SUCCESS;
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_ERR_MISMATCH);

  void *q = (void *)&value;
  CHECK_STATUS(sy_pool_alloc(pool, 64, &q, NULL), SY_ERR_MISMATCH);
  CHECK_STATUS(sy_host_pool_acquire(hpool, &q), SY_ERR_MISMATCH); /* even with a slot free */
  CHECK(q == (void *)&value);
  sy_pool_t pool2 = (sy_pool_t)&value;
  sy_host_pool_t hpool2 = (sy_host_pool_t)&value;
  CHECK_STATUS(sy_pool_create(ctx->comm, NULL, &pool2), SY_ERR_MISMATCH);
  CHECK_STATUS(sy_host_pool_create(ctx->comm, &hc, &hpool2), SY_ERR_MISMATCH);

  check_pool_counts(pool, 1024, 1024, 1, 0);
  CHECK_OK(sy_pool_free(pool, p, NULL));
  check_pool_counts(pool, 0, 1024, 1, 1);
  CHECK_EQ_INT(host_stats(hpool).free_slots, 1);
  CHECK_OK(sy_host_pool_release(hpool, slot, NULL));
  check_host_counts(hpool, 2, 1, 0);
  CHECK_STATUS(sy_host_pool_release(hpool, slot, NULL), SY_ERR_INVALID_ARG);
  CHECK_OK(sy_pool_destroy(pool));
  CHECK_OK(sy_host_pool_destroy(hpool));
}

int main(void) {
  const char *env = getenv("SY_TEST_SEED");
  if (env) rng_state = strtoull(env, NULL, 0) | 1;
  char dir[] = "/tmp/sy_test_pool_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  run_world(1, 0, fn_pool_create, NULL);
  run_world(1, 0, fn_pool_args, NULL);
  run_world(1, 0, fn_pool_stats, NULL);
  run_world(3, 0, fn_pool_stats, NULL);
  run_world(1, 0, fn_pool_many, NULL);
  run_world(1, 0, fn_pool_destroy_live, NULL);
  run_world(1, 0, fn_host_pool_config, NULL);
  run_world(1, SHORT_TIMEOUT_MS, fn_host_pool_slots, NULL);
  run_world(1, 0, fn_host_pool_handoff, NULL);
  run_world(1, 0, fn_host_pool_cycles, NULL);
  run_world(2, 0, fn_sticky, NULL);

  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  return check_report();
}
