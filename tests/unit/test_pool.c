/*
 * test_pool.c — the stream-ordered device pool on the host backend (src/mem/pool.c; the API at the end of
 * switchyard.h; the pinned host pool: test_host_pool.c):
 *   sy_pool       create with and without a config; every bad argument rejected with a line naming it and the
 *                 pool's stats unchanged; 256-byte aligned, writable, disjoint allocations; the stats exact after
 *                 a sequence (the host backend rounds to 256 bytes, reserved = used); 10,000 live allocations
 *                 freed in random order and a long churn (the live table's growth, rehash and tombstones);
 *                 destroy with allocations still live frees them and warns.
 *   sticky error  after a recorded mismatch, alloc, acquire and create (of both pools) return it; free, release,
 *                 stats and destroy still answer.
 * The log goes to a file in a scratch directory so the test can read what each rejection named.
 */
#include "pool_test.h"

#include "mem/pool.h"

/* ---- sy_pool: create and bad arguments ---------------------------------------------------------------- */

static void fn_pool_create(rank_ctx_t *ctx) {
  sy_pool_t pool = (sy_pool_t)ctx; /* must be cleared by a rejection */
  sy_pool_config_t config = SY_POOL_CONFIG_INIT;
  CHECK_EQ_INT(config.size, sizeof config);
  CHECK(config.release_threshold == SIZE_MAX);
  REJECT(sy_pool_create(NULL, &config, &pool), "comm is NULL");
  CHECK(pool == NULL);
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

  void *p = (void *)&before; /* sentinel: a rejected alloc sets *ptr to NULL (switchyard.h's conventions) */
  REJECT(sy_pool_alloc(NULL, 64, &p, NULL), "pool is NULL");
  REJECT(sy_pool_alloc(pool, 64, NULL, NULL), "ptr is NULL");
  REJECT(sy_pool_alloc(pool, 0, &p, NULL), "bytes is 0");
  REJECT(sy_pool_alloc(pool, SIZE_MAX, &p, NULL), "too large");
  REJECT(sy_pool_alloc(pool, SIZE_MAX - 254, &p, NULL), "too large");
  CHECK(p == NULL);
  /* Allowed, but no memory has room for it: SY_ERR_NO_MEMORY, nothing allocated. */
  p = (void *)&before;
  CHECK_STATUS(sy_pool_alloc(pool, SIZE_MAX - 256, &p, NULL), SY_ERR_NO_MEMORY);
  CHECK(p == NULL);

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

/* A holder (an attention plan's hold, sy__pool_retain) keeps the pool through its creator's destroy: its memory
 * stays usable and freeable until the last holder lets go. */
static void fn_pool_held(rank_ctx_t *ctx) {
  sy_pool_t pool = NULL;
  CHECK_OK(sy_pool_create(ctx->comm, NULL, &pool));
  if (!pool) return;
  unsigned char *p = NULL;
  CHECK_OK(sy_pool_alloc(pool, 300, (void **)&p, NULL));
  if (!p) return;
  sy__pool_retain(pool);
  CHECK_OK(sy_pool_destroy(pool)); /* the creator's: the holder keeps it */
  fill(p, 300, 9);
  CHECK_EQ_INT(count_wrong(p, 300, 9), 0);
  check_pool_counts(pool, 512, 512, 1, 0);
  CHECK_OK(sy__pool_free_now(pool, p));
  check_pool_counts(pool, 0, 512, 1, 1);
  CHECK_OK(sy_pool_destroy(pool)); /* the holder's: now it goes */
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
  CHECK(q == NULL); /* a failed allocation sets its output to NULL (switchyard.h) */
  q = (void *)&value;
  CHECK_STATUS(sy_host_pool_acquire(hpool, &q), SY_ERR_MISMATCH); /* even with a slot free */
  CHECK(q == NULL);
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
  char dir[] = "/tmp/sy_test_pool_XXXXXX";
  pool_test_begin(dir);
  run_world(1, 0, fn_pool_create, NULL);
  run_world(1, 0, fn_pool_args, NULL);
  run_world(1, 0, fn_pool_stats, NULL);
  run_world(3, 0, fn_pool_stats, NULL);
  run_world(1, 0, fn_pool_many, NULL);
  run_world(1, 0, fn_pool_destroy_live, NULL);
  run_world(1, 0, fn_pool_held, NULL);
  run_world(2, 0, fn_sticky, NULL);
  return pool_test_end(dir);
}
