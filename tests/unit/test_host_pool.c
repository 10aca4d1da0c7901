/*
 * test_host_pool.c — the pinned host pool on the host backend (src/mem/host_pool.c; the API at the end of
 * switchyard.h): bad configs; every slot acquired, distinct and writable; a full pool times out within the
 * communicator's timeout and counts the wait; releases of foreign, interior, past-the-end and released slots
 * refused; a second thread blocked in acquire gets exactly the slot given back; hundreds of cycles through 3
 * slots, never one handed out twice; destroy with slots held. (After a sticky error: test_pool.c.)
 */
#include "pool_test.h"

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
  pool = (sy_host_pool_t)ctx;
  REJECT(sy_host_pool_create(NULL, &c, &pool), "comm is NULL");
  CHECK(pool == NULL);
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
  CHECK(slot == NULL); /* a refused acquire sets *slot to NULL */
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
  CHECK(none == NULL);
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

int main(void) {
  char dir[] = "/tmp/sy_test_host_pool_XXXXXX";
  pool_test_begin(dir);
  run_world(1, 0, fn_host_pool_config, NULL);
  run_world(1, SHORT_TIMEOUT_MS, fn_host_pool_slots, NULL);
  run_world(1, 0, fn_host_pool_handoff, NULL);
  run_world(1, 0, fn_host_pool_cycles, NULL);
  return pool_test_end(dir);
}
