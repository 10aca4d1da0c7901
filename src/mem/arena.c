/*
 * arena.c — first fit on the host with frees in stream order (arena.h says how the blocks move).
 */
#include "mem/arena.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

void sy__arena_init(sy_arena_t *a, size_t bytes) {
  memset(a, 0, sizeof *a);
  a->bytes = bytes;
  pthread_mutex_init(&a->mu, NULL);
  pthread_mutex_init(&a->enq, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&a->cv, &attr);
  pthread_condattr_destroy(&attr);
}

void sy__arena_fini(sy_arena_t *a) {
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  pthread_mutex_destroy(&a->enq);
  free(a->blocks);
  a->blocks = NULL;
  a->n = a->cap = 0;
}

void sy__arena_lock(sy_arena_t *a) { pthread_mutex_lock(&a->mu); }
void sy__arena_unlock(sy_arena_t *a) { pthread_mutex_unlock(&a->mu); }
void sy__arena_enqueue_lock(sy_arena_t *a) { pthread_mutex_lock(&a->enq); }
void sy__arena_enqueue_unlock(sy_arena_t *a) { pthread_mutex_unlock(&a->enq); }

uint64_t sy__arena_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int room(sy_arena_t *a, int more) {
  if (a->n + more <= a->cap) return 1;
  int cap = a->cap ? 2 * a->cap : 16;
  while (cap < a->n + more) cap *= 2;
  void *p = realloc(a->blocks, (size_t)cap * sizeof *a->blocks);
  if (!p) return 0;
  a->blocks = p, a->cap = cap;
  return 1;
}

static void remove_at(sy_arena_t *a, int i) {
  memmove(a->blocks + i, a->blocks + i + 1, (size_t)(a->n - i - 1) * sizeof *a->blocks);
  a->n--;
}

static void insert_at(sy_arena_t *a, int i, sy_arena_block_t b) {
  memmove(a->blocks + i + 1, a->blocks + i, (size_t)(a->n - i) * sizeof *a->blocks);
  a->blocks[i] = b;
  a->n++;
}

/* Block i may be taken by an allocation on `stream`: freed on it, owing no other stream. */
static int reusable(const sy_arena_t *a, int i, const void *stream, int reuse_ok) {
  const sy_arena_block_t *b = &a->blocks[i];
  return reuse_ok && b->on_stream && b->stream == stream && stream != NULL && b->dep == 0;
}

/* The first gap of `bytes` where blocks that pass `freeish` count as free: its index (the first block after the
 * gap's start) and offset, or -1. */
static int first_fit(const sy_arena_t *a, size_t bytes, const void *stream, int reuse_ok, int every_on_stream,
                     size_t *from_out) {
  size_t from = 0;
  int first = 0;
  for (int i = 0; i <= a->n; i++) {
    if (i < a->n && (every_on_stream ? a->blocks[i].on_stream : reusable(a, i, stream, reuse_ok))) continue;
    const size_t end = i < a->n ? a->blocks[i].at : a->bytes;
    if (end >= from && end - from >= bytes) {
      *from_out = from;
      return first;
    }
    if (i < a->n) from = align256(a->blocks[i].at + a->blocks[i].bytes), first = i + 1;
  }
  return -1;
}

int sy__arena_take(sy_arena_t *a, size_t bytes, const void *stream, int reuse_ok, size_t *at, uint64_t *id) {
  if (!room(a, 2)) return -1;
  size_t from = 0;
  int first = first_fit(a, bytes, stream, reuse_ok, 0, &from);
  if (first < 0) return first_fit(a, bytes, stream, reuse_ok, 1, &from) < 0 ? -2 : 0;
  /* the blocks freed on this stream that the new one covers: dropped, the part of one past its end kept (same id,
   * same stream); the new block owes their frees (the newest id: the stream runs them in id order) */
  sy_arena_block_t rest = {0, 0, 0, NULL, 0, 0, NULL};
  int keep_rest = 0;
  uint64_t dep = 0;
  while (first < a->n && reusable(a, first, stream, reuse_ok) && a->blocks[first].at < from + bytes) {
    const sy_arena_block_t *c = &a->blocks[first];
    const size_t tail = align256(from + bytes), c_end = c->at + c->bytes;
    if (c_end > tail) rest = *c, rest.at = tail, rest.bytes = c_end - tail, keep_rest = 1;
    if (c->id > dep) dep = c->id;
    remove_at(a, first);
  }
  const sy_arena_block_t nb = {from, bytes, ++a->ids, NULL, 0, dep, dep ? stream : NULL};
  insert_at(a, first, nb);
  if (keep_rest) insert_at(a, first + 1, rest);
  *at = from;
  *id = nb.id;
  return 1;
}

int sy__arena_find(const sy_arena_t *a, size_t at) {
  for (int i = 0; i < a->n; i++)
    if (a->blocks[i].at == at && !a->blocks[i].on_stream) return i;
  return -1;
}

/* Block i now waits for the free it owes (on its dep_stream, under that free's id), or goes. */
static void settle(sy_arena_t *a, int i) {
  sy_arena_block_t *b = &a->blocks[i];
  if (b->dep) {
    b->on_stream = 1, b->id = b->dep, b->stream = b->dep_stream;
    b->dep = 0, b->dep_stream = NULL;
  } else {
    remove_at(a, i);
  }
  pthread_cond_broadcast(&a->cv);
}

void sy__arena_free_now(sy_arena_t *a, int i) { settle(a, i); }

uint64_t sy__arena_free_on(sy_arena_t *a, int i, uint64_t *old) {
  if (a->open) return 0; /* another free's host function is not in its stream yet: ids could pass each other */
  sy_arena_block_t *b = &a->blocks[i];
  *old = b->id;
  b->id = ++a->ids, b->on_stream = 1, b->stream = NULL; /* nobody's until its host function is in the stream */
  a->pending++;
  a->open = b->id;
  return b->id;
}

void sy__arena_enqueued(sy_arena_t *a, uint64_t id, const void *stream) {
  if (a->open == id) a->open = 0;
  for (int i = 0; i < a->n; i++) {
    sy_arena_block_t *b = &a->blocks[i];
    if (b->id != id || !b->on_stream) continue;
    b->stream = stream;
    if (b->dep && b->dep_stream == stream) b->dep = 0, b->dep_stream = NULL; /* its order covers that free */
  }
}

void sy__arena_unfree(sy_arena_t *a, uint64_t id, uint64_t old) {
  if (a->open == id) a->open = 0;
  for (int i = 0; i < a->n; i++)
    if (a->blocks[i].id == id && a->blocks[i].on_stream) a->blocks[i].id = old, a->blocks[i].on_stream = 0;
  a->pending--;
}

void sy__arena_reached(sy_arena_t *a, uint64_t id) {
  for (int i = 0; i < a->n; i++) /* the blocks of that free (a remnant shares the id): settled */
    if (a->blocks[i].id == id && a->blocks[i].on_stream) {
      const int n = a->n;
      settle(a, i);
      if (a->n < n) i--;
    }
  for (int i = 0; i < a->n; i++) /* the blocks that owed it owe nothing now */
    if (a->blocks[i].dep == id) a->blocks[i].dep = 0, a->blocks[i].dep_stream = NULL;
  a->pending--;
  pthread_cond_broadcast(&a->cv);
}

int sy__arena_wait(sy_arena_t *a, uint64_t deadline_ns) {
  if (sy__arena_now_ns() >= deadline_ns) return 0;
  const struct timespec ts = {(time_t)(deadline_ns / 1000000000ull), (long)(deadline_ns % 1000000000ull)};
  pthread_cond_timedwait(&a->cv, &a->mu, &ts);
  return 1;
}

void sy__arena_usage(const sy_arena_t *a, size_t *live, size_t *on_streams, int *live_blocks) {
  *live = *on_streams = 0;
  *live_blocks = 0;
  for (int i = 0; i < a->n; i++) {
    if (a->blocks[i].on_stream) *on_streams += a->blocks[i].bytes;
    else *live += a->blocks[i].bytes, ++*live_blocks;
  }
}
