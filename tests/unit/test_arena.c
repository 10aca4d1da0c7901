/*
 * test_arena.c — the receive arena's bookkeeping (src/mem/arena.c: first fit, frees in stream order) driven with
 * simulated streams: each stream a queue of frees whose host functions have not run. The rule checked after every
 * allocation: no memory freed on a stream that has not reached that free goes to an allocation on another stream
 * (the same stream may take it: its work comes after the free). First the cases a review found (an allocation that
 * reused a pending block, then freed at once or on a third stream), then 20,000 random steps — allocations and
 * frees (at once, on a stream, an enqueue that fails, a host function that runs before the enqueue returns),
 * streams reaching their frees — with the list's order, overlap and alignment checked each step; at the end every
 * stream drains and the whole arena is one gap again.
 */
#include "check.h"
#include "mem/arena.h"

#define NS      3 /* streams */
#define MAXQ    4096
#define MAXLIVE 64
#define MAXHAZ  8192
#define ARENA   (64 * 1024)

static char stream_key[NS];

typedef struct {
  uint64_t q[MAXQ];
  int head, tail;
} queue_t;

typedef struct {
  size_t at, bytes;
  int stream;
  uint64_t id;
  int resolved;
} hazard_t;

typedef struct {
  size_t at, bytes;
} live_t;

static queue_t queues[NS];
static hazard_t haz[MAXHAZ];
static int nhaz;
static live_t live[MAXLIVE];
static int nlive;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng % n);
}

static int overlaps(size_t a, size_t an, size_t b, size_t bn) { return a < b + bn && b < a + an; }

/* An allocation of `bytes` on stream s: 1 taken (checked against the hazards and the live allocations). */
static int alloc_on(sy_arena_t *a, int s, size_t bytes, size_t *at_out) {
  size_t at = 0;
  uint64_t id = 0;
  const int took = sy__arena_take(a, bytes, &stream_key[s], 1, &at, &id);
  if (took != 1) return took;
  CHECK(at % 256 == 0 && at + bytes <= ARENA);
  for (int h = 0; h < nhaz; h++)
    if (!haz[h].resolved && overlaps(at, bytes, haz[h].at, haz[h].bytes) && haz[h].stream != s) {
      fprintf(stderr, "memory freed on stream %d (free %llu, not reached) went to an allocation on stream %d\n",
              haz[h].stream, (unsigned long long)haz[h].id, s);
      CHECK(0);
    }
  for (int i = 0; i < nlive; i++) CHECK(!overlaps(at, bytes, live[i].at, live[i].bytes));
  if (nlive < MAXLIVE) live[nlive].at = at, live[nlive].bytes = bytes, nlive++;
  *at_out = at;
  return 1;
}

static void forget(int k) { live[k] = live[--nlive]; }

static void free_now(sy_arena_t *a, int k) {
  const int i = sy__arena_find(a, live[k].at);
  CHECK(i >= 0);
  if (i >= 0) sy__arena_free_now(a, i);
  forget(k);
}

/* A free on stream s; `early`: its host function runs before the enqueue returns (an idle stream). */
static void free_on(sy_arena_t *a, int k, int s, int early) {
  const int i = sy__arena_find(a, live[k].at);
  CHECK(i >= 0);
  if (i < 0) return;
  uint64_t old = 0;
  const uint64_t id = sy__arena_free_on(a, i, &old);
  CHECK(nhaz < MAXHAZ);
  haz[nhaz++] = (hazard_t){live[k].at, live[k].bytes, s, id, early};
  if (early) {
    sy__arena_reached(a, id);
  } else {
    queue_t *q = &queues[s];
    q->q[q->tail++ % MAXQ] = id;
  }
  sy__arena_enqueued(a, id, &stream_key[s]);
  forget(k);
}

/* A free whose host function could not be enqueued: the allocation stays the caller's. */
static void free_fails(sy_arena_t *a, int k, int s) {
  const int i = sy__arena_find(a, live[k].at);
  CHECK(i >= 0);
  if (i < 0) return;
  uint64_t old = 0;
  const uint64_t id = sy__arena_free_on(a, i, &old);
  sy__arena_unfree(a, id, old);
  CHECK(sy__arena_find(a, live[k].at) == i);
}

static int reach(sy_arena_t *a, int s) {
  queue_t *q = &queues[s];
  if (q->head == q->tail) return 0;
  const uint64_t id = q->q[q->head++ % MAXQ];
  sy__arena_reached(a, id);
  for (int h = 0; h < nhaz; h++)
    if (haz[h].id == id) haz[h].resolved = 1;
  return 1;
}

static void check_list(const sy_arena_t *a) {
  int queued = 0;
  for (int s = 0; s < NS; s++) queued += queues[s].tail - queues[s].head;
  CHECK_EQ_INT(a->pending, queued);
  for (int i = 0; i < a->n; i++) {
    CHECK(a->blocks[i].at % 256 == 0 && a->blocks[i].bytes > 0 && a->blocks[i].at + a->blocks[i].bytes <= ARENA);
    if (i) CHECK(a->blocks[i].at >= a->blocks[i - 1].at + a->blocks[i - 1].bytes);
  }
}

static void reset(sy_arena_t *a) {
  sy__arena_init(a, ARENA);
  memset(queues, 0, sizeof queues);
  nhaz = nlive = 0;
}

/* The review's cases: an allocation on A that took A's pending block, then freed at once or on C. */
static void cases(void) {
  sy_arena_t a;
  size_t at = 0, at2 = 0;
  const size_t all = ARENA;
  /* freed at once: still A's until A reaches the first free */
  reset(&a);
  CHECK_EQ_INT(alloc_on(&a, 0, all, &at), 1);
  free_on(&a, 0, 0, 0);
  CHECK_EQ_INT(alloc_on(&a, 0, all, &at2), 1); /* A takes it at once */
  CHECK_EQ_INT(at2, at);
  free_now(&a, 0);
  CHECK_EQ_INT(alloc_on(&a, 1, all, &at2), 0); /* B: only once A gets there */
  CHECK_EQ_INT(alloc_on(&a, 0, all, &at2), 1); /* A: at once again */
  free_now(&a, 0);
  CHECK(reach(&a, 0));
  CHECK_EQ_INT(alloc_on(&a, 1, all, &at2), 1);
  free_now(&a, 0);
  CHECK_EQ_INT(a.n, 0);
  check_list(&a);
  sy__arena_fini(&a);
  /* freed on C: both A and C must get there, in either order */
  for (int order = 0; order < 2; order++) {
    reset(&a);
    CHECK_EQ_INT(alloc_on(&a, 0, all, &at), 1);
    free_on(&a, 0, 0, 0);
    CHECK_EQ_INT(alloc_on(&a, 0, all, &at2), 1);
    free_on(&a, 0, 2, 0);
    CHECK_EQ_INT(alloc_on(&a, 1, all, &at2), 0);
    CHECK_EQ_INT(alloc_on(&a, 2, all, &at2), 0); /* C owes A's free too */
    CHECK(reach(&a, order ? 0 : 2));
    CHECK_EQ_INT(alloc_on(&a, 1, all, &at2), 0);
    CHECK_EQ_INT(alloc_on(&a, order ? 2 : 0, all, &at2), 1); /* the stream still to get there may take it */
    free_now(&a, 0);
    CHECK(reach(&a, order ? 2 : 0));
    CHECK_EQ_INT(alloc_on(&a, 1, all, &at2), 1);
    free_now(&a, 0);
    CHECK_EQ_INT(a.n, 0);
    check_list(&a);
    sy__arena_fini(&a);
  }
  /* a second free before the first's host function is in its stream: refused, nothing changed (the caller holds
   * the enqueue lock from free_on to enqueued, so each stream gets its frees' host functions in id order; run 44's
   * review: two threads freeing on A out of that order let an allocation that owed both frees owe only the newer) */
  reset(&a);
  CHECK_EQ_INT(alloc_on(&a, 0, all / 2, &at), 1);
  CHECK_EQ_INT(alloc_on(&a, 0, all / 2, &at2), 1);
  {
    const int i = sy__arena_find(&a, at), j = sy__arena_find(&a, at2);
    uint64_t old = 0, old2 = 0;
    const uint64_t id = sy__arena_free_on(&a, i, &old);
    CHECK(id != 0);
    CHECK(sy__arena_free_on(&a, j, &old2) == 0);
    CHECK_EQ_INT(sy__arena_find(&a, at2), j); /* still live */
    CHECK_EQ_INT(a.pending, 1);
    sy__arena_enqueued(&a, id, &stream_key[0]);
    const uint64_t id2 = sy__arena_free_on(&a, j, &old2);
    CHECK(id2 > id);
    sy__arena_unfree(&a, id2, old2); /* could not be enqueued: the caller's again, and the next free may go */
    CHECK_EQ_INT(sy__arena_find(&a, at2), j);
    const uint64_t id3 = sy__arena_free_on(&a, j, &old2);
    CHECK(id3 > id2);
    sy__arena_enqueued(&a, id3, &stream_key[0]);
    CHECK_EQ_INT(alloc_on(&a, 1, all, &at2), 0);
    sy__arena_reached(&a, id);
    sy__arena_reached(&a, id3);
    CHECK_EQ_INT(a.pending, 0);
    CHECK_EQ_INT(a.n, 0);
  }
  sy__arena_fini(&a);
  /* a partial reuse: the pending block's tail stays pending on A */
  reset(&a);
  CHECK_EQ_INT(alloc_on(&a, 0, all, &at), 1);
  free_on(&a, 0, 0, 0);
  CHECK_EQ_INT(alloc_on(&a, 0, all / 4, &at2), 1);
  CHECK_EQ_INT(alloc_on(&a, 1, all / 4, &at2), 0); /* the rest is A's until A gets there */
  CHECK_EQ_INT(alloc_on(&a, 1, 2 * all, &at2), -2);
  CHECK(reach(&a, 0));
  CHECK_EQ_INT(alloc_on(&a, 1, all / 4, &at2), 1);
  check_list(&a);
  sy__arena_fini(&a);
}

static void random_steps(void) {
  sy_arena_t a;
  reset(&a);
  int taken = 0, waited = 0;
  for (int step = 0; step < 20000; step++) {
    const uint32_t op = rnd(100);
    const int s = (int)rnd(NS);
    if (op < 40 && nlive < MAXLIVE) {
      size_t at = 0;
      const size_t bytes = 256 * (1 + rnd(ARENA / 256 / 3)) - (rnd(2) ? rnd(200) : 0);
      const int took = alloc_on(&a, s, bytes, &at);
      taken += took == 1, waited += took == 0;
    } else if (op < 55 && nlive) {
      free_now(&a, (int)rnd((uint32_t)nlive));
    } else if (op < 75 && nlive) {
      free_on(&a, (int)rnd((uint32_t)nlive), s, queues[s].head == queues[s].tail && rnd(4) == 0);
    } else if (op < 78 && nlive) {
      free_fails(&a, (int)rnd((uint32_t)nlive), s);
    } else {
      reach(&a, s);
    }
    check_list(&a);
  }
  while (nlive) free_now(&a, 0);
  for (int s = 0; s < NS; s++)
    while (reach(&a, s)) {
    }
  check_list(&a);
  CHECK_EQ_INT(a.n, 0);
  size_t at = 0;
  CHECK_EQ_INT(alloc_on(&a, 1, ARENA, &at), 1);
  printf("test_arena: 20000 steps, %d allocations, %d that had to wait for a stream\n", taken, waited);
  CHECK(taken > 1000 && waited > 10);
  sy__arena_fini(&a);
}

int main(void) {
  cases();
  random_steps();
  return check_report();
}
