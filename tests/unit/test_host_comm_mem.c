/*
 * test_host_comm_mem.c — the host backend's symmetric memory, put with signal and host allgather
 * (src/host/comm.c): peer pointers of every allocation, stores through them, frees in any order; ranks that
 * allocate or free differently and a full heap fail on every rank with nothing done, and the communicator goes
 * on; puts around a ring with SET and ADD signals, zero-byte puts, waits for values already passed; the
 * allgather, and one whose byte counts disagree. Ranks are threads; each builds its own communicator as a user
 * would (host_comm_test.h). Rendezvous, barrier and the failure paths: test_host_comm.c.
 */
#include "host_comm_test.h"

/* ---- symmetric memory ------------------------------------------------------------------------------- */

static void gather_bases(rank_ctx_t *ctx, void *mine, void **bases) {
  CHECK_OK(sy_comm_allgather_host(ctx->comm, &mine, bases, sizeof mine));
}

static void check_peer_ptrs(rank_ctx_t *ctx, char *base, size_t bytes) {
  void *bases[MAX_RANKS] = {0};
  gather_bases(ctx, base, bases);
  CHECK(bases[ctx->rank] == base);
  const size_t offsets[] = {0, 1, 255, bytes / 2, bytes - 1};
  for (int p = 0; p < ctx->run->world; p++) {
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
      if (offsets[i] >= bytes) continue;
      void *q = (void *)1;
      CHECK_OK(sy_comm_peer_ptr(ctx->comm, base + offsets[i], p, &q));
      CHECK(q == (char *)bases[p] + offsets[i]);
    }
  }
}

static void fn_symmetric(rank_ctx_t *ctx) {
  const int world = ctx->run->world, rank = ctx->rank;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  char *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, 4096, (void **)&a));
  CHECK_OK(sy_mem_alloc(ctx->comm, 333, (void **)&b));
  CHECK_OK(sy_mem_alloc(ctx->comm, 1000, (void **)&c));
  if (!a || !b || !c) return;
  CHECK(((uintptr_t)a & 255) == 0 && ((uintptr_t)b & 255) == 0 && ((uintptr_t)c & 255) == 0);
  check_peer_ptrs(ctx, a, 4096);
  check_peer_ptrs(ctx, b, 333);
  check_peer_ptrs(ctx, c, 1000);
  void *self = NULL;
  CHECK_OK(sy_comm_peer_ptr(ctx->comm, a + 17, rank, &self));
  CHECK(self == a + 17);

  /* Stores through a peer pointer are the peer's bytes after a barrier. */
  char *remote = NULL;
  CHECK_OK(sy_comm_peer_ptr(ctx->comm, a + 100 * rank, next, (void **)&remote));
  for (size_t k = 0; k < 100; k++) remote[k] = (char)pattern(rank, 1, k);
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  for (size_t k = 0; k < 100; k++) CHECK_EQ_INT((unsigned char)a[100 * prev + k], pattern(prev, 1, k));

  /* Free the middle one; the others still translate, and a new allocation does too. */
  CHECK_OK(sy_mem_free(ctx->comm, b));
  check_peer_ptrs(ctx, c, 1000);
  check_peer_ptrs(ctx, a, 4096);
  char *blocks[10] = {0};
  for (int i = 0; i < 10; i++) CHECK_OK(sy_mem_alloc(ctx->comm, (size_t)(i * 97 + 1), (void **)&blocks[i]));
  for (int i = 0; i < 10; i += 2) CHECK_OK(sy_mem_free(ctx->comm, blocks[i]));
  for (int i = 1; i < 10; i += 2) check_peer_ptrs(ctx, blocks[i], (size_t)(i * 97 + 1));
  for (int i = 1; i < 10; i += 2) CHECK_OK(sy_mem_free(ctx->comm, blocks[i]));
  CHECK_OK(sy_mem_free(ctx->comm, a));
  /* c is left allocated: destroy frees it. */
}

static void test_symmetric(void) {
  static const int worlds[] = {1, 3, 4};
  for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
    run_shared_t run = make_run(worlds[i], 1000 + worlds[i], fn_symmetric);
    run_ranks(&run);
  }
}

static void fn_alloc_mismatch(rank_ctx_t *ctx) {
  void *p = (void *)1;
  /* Rank 1 asks for more: every rank gets SY_ERR_MISMATCH and nothing stays allocated. */
  CHECK_STATUS(sy_mem_alloc(ctx->comm, ctx->rank == 1 ? 4096 + 256 : 4096, &p), SY_ERR_MISMATCH);
  CHECK(p == NULL);
  CHECK_EQ_INT(ctx->comm->symm_count, 0);
  /* Not sticky: the communicator goes on. */
  void *x = NULL, *y = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, 4096, &x));
  CHECK_OK(sy_mem_alloc(ctx->comm, 4000, &y)); /* takes 4096 (256-byte granules) */
  /* The heap (config.heap_bytes = 8192) is full now: every rank gets SY_ERR_NO_MEMORY, nothing allocated. */
  void *z = (void *)1;
  CHECK_STATUS(sy_mem_alloc(ctx->comm, 1, &z), SY_ERR_NO_MEMORY);
  CHECK(z == NULL);
  CHECK_EQ_INT(ctx->comm->symm_count, 2);
  CHECK_STATUS(sy_mem_alloc(ctx->comm, 8193, &z), SY_ERR_INVALID_ARG); /* more than the whole heap: local */
  /* Ranks that free different allocations: every rank gets SY_ERR_MISMATCH, nothing freed. */
  CHECK_STATUS(sy_mem_free(ctx->comm, ctx->rank == 2 ? y : x), SY_ERR_MISMATCH);
  CHECK_EQ_INT(ctx->comm->symm_count, 2);
  CHECK_OK(sy_mem_free(ctx->comm, x));
  CHECK_OK(sy_mem_alloc(ctx->comm, 4096, &z)); /* x's room is back */
  CHECK_OK(sy_mem_free(ctx->comm, z));
  CHECK_OK(sy_mem_free(ctx->comm, y));
  CHECK_EQ_INT(ctx->comm->symm_count, 0);
  sy_status_t async = SY_ERR_INTERNAL;
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_SUCCESS);
}

static void test_alloc_mismatch(void) {
  run_shared_t run = make_run(3, 1100, fn_alloc_mismatch);
  run.heap_bytes = 8192;
  run_ranks(&run);
}

/* ---- put with signal --------------------------------------------------------------------------------- */

#define RING_BYTES 4099

static void fn_put_ring(rank_ctx_t *ctx) {
  const int world = ctx->run->world, rank = ctx->rank;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  unsigned char *buf = NULL, *src = malloc(RING_BYTES);
  uint64_t *sig = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, RING_BYTES, (void **)&buf));
  CHECK_OK(sy_mem_alloc(ctx->comm, 2 * sizeof(uint64_t), (void **)&sig));
  if (!buf || !sig || !src) {
    free(src);
    return;
  }
  sig[0] = sig[1] = 0;
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  int bad = 0;
  for (int i = 1; i <= 100; i++) {
    size_t len = i % 10 == 0 ? 0 : (size_t)(i * 37 + 11) % (RING_BYTES + 1); /* 0: signal only */
    for (size_t k = 0; k < len; k++) src[k] = pattern(rank, i, k);
    if (i % 2) {
      CHECK_OK(sy_put_signal(ctx->comm, buf, src, len, &sig[0], SY_SIGNAL_SET, (uint64_t)i, next, NULL));
      memset(src, 0, len); /* the put completed: src is free again */
      CHECK_OK(sy_signal_wait(ctx->comm, &sig[0], (uint64_t)i, NULL));
      CHECK_EQ_INT(__atomic_load_n(&sig[0], __ATOMIC_ACQUIRE), i);
    } else {
      CHECK_OK(sy_put_signal(ctx->comm, buf, src, len, &sig[1], SY_SIGNAL_ADD, 1, next, NULL));
      memset(src, 0, len);
      CHECK_OK(sy_signal_wait(ctx->comm, &sig[1], (uint64_t)(i / 2), NULL));
      CHECK_EQ_INT(__atomic_load_n(&sig[1], __ATOMIC_ACQUIRE), i / 2);
    }
    for (size_t k = 0; k < len; k++) bad += buf[k] != pattern(prev, i, k);
    CHECK_OK(sy_comm_barrier(ctx->comm, NULL)); /* the checker is done before the next put lands */
  }
  CHECK_EQ_INT(bad, 0);
  /* A larger ADD, a put into the middle of dst, and a wait for a value already passed. */
  for (size_t k = 0; k < 10; k++) src[k] = pattern(rank, 999, k);
  CHECK_OK(sy_put_signal(ctx->comm, buf + 1000, src, 10, &sig[1], SY_SIGNAL_ADD, 1000, next, NULL));
  CHECK_OK(sy_signal_wait(ctx->comm, &sig[1], 1050, NULL));
  for (size_t k = 0; k < 10; k++) CHECK_EQ_INT(buf[1000 + k], pattern(prev, 999, k));
  CHECK_OK(sy_signal_wait(ctx->comm, &sig[0], 1, NULL));
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  CHECK_OK(sy_mem_free(ctx->comm, sig));
  CHECK_OK(sy_mem_free(ctx->comm, buf));
  free(src);
}

static void test_put_ring(void) {
  static const int worlds[] = {1, 2, 3, 4};
  for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
    run_shared_t run = make_run(worlds[i], 1200 + worlds[i], fn_put_ring);
    run_ranks(&run);
  }
}

/* ---- allgather_host ---------------------------------------------------------------------------------- */

static void fn_allgather(rank_ctx_t *ctx) {
  const int world = ctx->run->world;
  unsigned char send[14], recv[14 * MAX_RANKS];
  for (size_t k = 0; k < sizeof send; k++) send[k] = pattern(ctx->rank, 7, k);
  memset(recv, 0xEE, sizeof recv);
  CHECK_OK(sy_comm_allgather_host(ctx->comm, send, recv, 13));
  for (int r = 0; r < world; r++)
    for (size_t k = 0; k < 13; k++) CHECK_EQ_INT(recv[13 * r + k], pattern(r, 7, k));
  for (size_t k = 13 * (size_t)world; k < sizeof recv; k++) CHECK_EQ_INT(recv[k], 0xEE);
  /* Rank 2 contributes 14 bytes: every rank gets SY_ERR_MISMATCH and recv untouched. */
  memset(recv, 0xEE, sizeof recv);
  CHECK_STATUS(sy_comm_allgather_host(ctx->comm, send, recv, ctx->rank == 2 ? 14 : 13), SY_ERR_MISMATCH);
  for (size_t k = 0; k < sizeof recv; k++) CHECK_EQ_INT(recv[k], 0xEE);
  CHECK_OK(sy_comm_allgather_host(ctx->comm, send, recv, 1));
  for (int r = 0; r < world; r++) CHECK_EQ_INT(recv[r], pattern(r, 7, 0));
}

static void test_allgather(void) {
  run_shared_t run = make_run(4, 1300, fn_allgather);
  run_ranks(&run);
}
int main(void) {
  test_symmetric();
  test_alloc_mismatch();
  test_put_ring();
  test_allgather();
  return check_report();
}
