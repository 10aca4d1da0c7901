/*
 * test_bad_args.c — every public entry point rejects bad input with SY_ERR_INVALID_ARG, a log line naming
 * the argument, and nothing changed (receive buffers and signals compared before and after): among them world
 * sizes above SY_MAX_WORLD_SIZE and an empty SY_HEAP_SIZE at init, all-to-all byte counts whose sums wrap
 * (issue 18's reproduction, on both ranks) and send ranges that leave their buffer. Ranks that disagree on an
 * all-to-all get SY_ERR_MISMATCH everywhere with nothing copied; after that sticky error the queries of what
 * init fixed still answer and everything else returns the error. The log goes to a file in a scratch directory
 * so the test can read which argument each rejection named.
 */
#include "check.h"
#include "core/internal.h"
#include "switchyard.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the log, read back ----------------------------------------------------------------------------- */

/* The call must be rejected as invalid, with a log line containing needle. */
#define REJECT(call, needle) CHECK_REJECTED(call, needle)

static sy_comm_config_t make_config(int rank, int world, int group) {
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = rank;
  config.world_size = world;
  config.host_group = group;
  config.timeout_ms = 30000;
  return config;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131 + seed * 7) % 251 + 1);
}

/* ---- init ----------------------------------------------------------------------------------------------- */

static void test_init_args(void) {
  sy_comm_config_t config = make_config(0, 1, 3000);
  sy_comm_t comm = (sy_comm_t)&config; /* must be cleared */
  REJECT(sy_comm_init(NULL, &config), "comm is NULL");

  config.size = 0;
  REJECT(sy_comm_init(&comm, &config), "config->size=0");
  CHECK(comm == NULL);
  config.size = 4;
  REJECT(sy_comm_init(&comm, &config), "config->size=4");
  config = make_config(0, 1, 3000);
  config.backend = (sy_backend_t)7;
  REJECT(sy_comm_init(&comm, &config), "config->backend=7");
  config = make_config(1, 1, 3000);
  REJECT(sy_comm_init(&comm, &config), "config->rank=1");
  config = make_config(-1, 2, 3000);
  REJECT(sy_comm_init(&comm, &config), "set both or neither");
  config = make_config(0, 0, 3000);
  REJECT(sy_comm_init(&comm, &config), "config->world_size=0");
  config = make_config(-2, -2, 3000);
  REJECT(sy_comm_init(&comm, &config), "config->rank=-2");
  config = make_config(0, 1, 3000);
  config.device = -2;
  REJECT(sy_comm_init(&comm, &config), "config->device=-2");
  config = make_config(-1, -1, 3000);
  REJECT(sy_comm_init(&comm, &config), "config->rank=-1");
  CHECK(comm == NULL);

  /* An older, shorter config: the fields it lacks take their defaults. */
  config = make_config(0, 1, 3000);
  config.size = offsetof(sy_comm_config_t, heap_bytes);
  config.heap_bytes = 1; /* beyond size: ignored */
  CHECK_OK(sy_comm_init(&comm, &config));
  if (comm) {
    void *p = NULL;
    CHECK_OK(sy_mem_alloc(comm, 4096, &p)); /* the default heap, not 1 byte */
    CHECK_OK(sy_comm_destroy(comm));
  }
  CHECK_OK(sy_comm_destroy(NULL));
  /* A world size no machine holds is named, whether the config or the launcher's environment gives it. */
  config = make_config(0, INT_MAX, 3000);
  REJECT(sy_comm_init(&comm, &config), "config->world_size=2147483647 exceeds SY_MAX_WORLD_SIZE=65536");
  config = make_config(0, SY_MAX_WORLD_SIZE + 1, 3000);
  REJECT(sy_comm_init(&comm, &config), "config->world_size=65537 exceeds SY_MAX_WORLD_SIZE");
  CHECK(comm == NULL);
  setenv("SY_RANK", "0", 1);
  setenv("SY_WORLD_SIZE", "2147483647", 1);
  config = make_config(-1, -1, 3000);
  config.backend = SY_BACKEND_CUDA; /* reads the launcher; rejected before any device is touched */
  REJECT(sy_comm_init(&comm, &config), "SY_WORLD_SIZE=2147483647 exceeds SY_MAX_WORLD_SIZE=65536");
  CHECK(comm == NULL);
  unsetenv("SY_RANK");
  unsetenv("SY_WORLD_SIZE");

  /* An empty symmetric heap from the environment: every allocation would fail, so init refuses it. */
  config = make_config(0, 1, 3000);
  setenv("SY_HEAP_SIZE", "0", 1);
  REJECT(sy_comm_init(&comm, &config), "environment variable SY_HEAP_SIZE=0: the symmetric heap would be empty");
  setenv("SY_HEAP_SIZE", "0M", 1);
  REJECT(sy_comm_init(&comm, &config), "SY_HEAP_SIZE=0M");
  CHECK(comm == NULL);
  config.heap_bytes = 1 << 20; /* the config's own size wins over the variable */
  CHECK_OK(sy_comm_init(&comm, &config));
  CHECK_OK(sy_comm_destroy(comm));
  comm = NULL;
  unsetenv("SY_HEAP_SIZE");

  /* NULL config: all defaults; the host backend then needs an explicit rank, so it is rejected. */
  const char *backend = getenv("SY_BACKEND");
  if (backend && !strcmp(backend, "host")) REJECT(sy_comm_init(&comm, NULL), "config->rank=-1");
}

/* ---- one rank: everything that needs no peer ---------------------------------------------------------- */

#define RECV_BYTES 4096

static void test_single_rank_args(void) {
  sy_comm_config_t config = make_config(0, 1, 3001);
  config.heap_bytes = 1 << 20;
  sy_comm_t comm = NULL;
  CHECK_OK(sy_comm_init(&comm, &config));
  if (!comm) return;
  unsigned char *recv = NULL, *heap_sig = NULL;
  CHECK_OK(sy_mem_alloc(comm, RECV_BYTES, (void **)&recv));
  CHECK_OK(sy_mem_alloc(comm, 20, (void **)&heap_sig));
  if (!recv || !heap_sig) return;
  uint64_t *signal = (uint64_t *)heap_sig;
  unsigned char before[RECV_BYTES], sig_before[20], src[64], *plain = malloc(RECV_BYTES);
  fill(recv, RECV_BYTES, 1);
  fill(heap_sig, 20, 2);
  fill(src, sizeof src, 3);
  memcpy(before, recv, RECV_BYTES);
  memcpy(sig_before, heap_sig, 20);
  int i = 0;
  sy_backend_t backend;
  sy_status_t st;
  char detail[32];

  /* Queries. */
  REJECT(sy_comm_rank(NULL, &i), "both required");
  REJECT(sy_comm_rank(comm, NULL), "both required");
  REJECT(sy_comm_size(NULL, &i), "both required");
  REJECT(sy_comm_size(comm, NULL), "both required");
  REJECT(sy_comm_backend(NULL, &backend), "both required");
  REJECT(sy_comm_backend(comm, NULL), "both required");
  REJECT(sy_comm_device(NULL, &i), "both required");
  REJECT(sy_comm_device(comm, NULL), "both required");
  REJECT(sy_comm_async_error(NULL, &st, NULL, 0), "comm is NULL");
  REJECT(sy_comm_async_error(comm, NULL, NULL, 0), "async_status is NULL");
  REJECT(sy_comm_async_error(comm, &st, detail, 0), "detail_bytes=0");

  /* allgather_host. */
  unsigned char gathered[16];
  fill(gathered, sizeof gathered, 4);
  unsigned char gathered_before[16];
  memcpy(gathered_before, gathered, sizeof gathered);
  REJECT(sy_comm_allgather_host(NULL, src, gathered, 4), "comm is NULL");
  REJECT(sy_comm_allgather_host(comm, src, gathered, 0), "bytes=0");
  REJECT(sy_comm_allgather_host(comm, src, gathered, (1u << 20) + 1), "bytes=1048577");
  REJECT(sy_comm_allgather_host(comm, NULL, gathered, 4), "send is NULL");
  REJECT(sy_comm_allgather_host(comm, src, NULL, 4), "recv is NULL");
  CHECK(memcmp(gathered, gathered_before, sizeof gathered) == 0);

  /* Symmetric memory. */
  void *p = (void *)1;
  REJECT(sy_mem_alloc(NULL, 64, &p), "comm is NULL");
  REJECT(sy_mem_alloc(comm, 64, NULL), "ptr is NULL");
  REJECT(sy_mem_alloc(comm, 0, &p), "bytes=0");
  CHECK(p == NULL);
  p = (void *)1;
  REJECT(sy_mem_alloc(comm, (2 << 20), &p), "exceeds the symmetric heap");
  CHECK(p == NULL);
  REJECT(sy_mem_alloc(comm, SIZE_MAX, &p), "exceeds the symmetric heap");
  REJECT(sy_mem_free(NULL, recv), "comm is NULL");
  REJECT(sy_mem_free(comm, NULL), "ptr is NULL");
  REJECT(sy_mem_free(comm, plain), "not a symmetric allocation");
  REJECT(sy_mem_free(comm, recv + 1), "not a symmetric allocation");
  CHECK_EQ_INT(comm->symm_count, 2);
  REJECT(sy_comm_peer_ptr(NULL, recv, 0, &p), "comm is NULL");
  REJECT(sy_comm_peer_ptr(comm, recv, 0, NULL), "peer_ptr is NULL");
  p = (void *)1;
  REJECT(sy_comm_peer_ptr(comm, recv, -1, &p), "peer=-1");
  CHECK(p == NULL);
  REJECT(sy_comm_peer_ptr(comm, recv, 1, &p), "peer=1");
  REJECT(sy_comm_peer_ptr(comm, plain, 0, &p), "not inside a symmetric allocation");
  REJECT(sy_comm_peer_ptr(comm, recv + RECV_BYTES, 0, &p), "not inside a symmetric allocation");
  REJECT(sy_comm_peer_ptr(comm, NULL, 0, &p), "not inside a symmetric allocation");

  /* Barrier and signals; a NULL stream is fine on the host backend. */
  REJECT(sy_comm_barrier(NULL, NULL), "comm is NULL");
  CHECK_OK(sy_comm_barrier(comm, NULL));
  REJECT(sy_put_signal(NULL, recv, src, 8, signal, SY_SIGNAL_SET, 1, 0, NULL), "comm is NULL");
  REJECT(sy_put_signal(comm, recv, src, 8, signal, SY_SIGNAL_SET, 1, 1, NULL), "peer=1");
  REJECT(sy_put_signal(comm, recv, src, 8, signal, SY_SIGNAL_SET, 1, -1, NULL), "peer=-1");
  REJECT(sy_put_signal(comm, recv, src, 8, signal, (sy_signal_op_t)2, 1, 0, NULL), "op=2");
  REJECT(sy_put_signal(comm, recv, NULL, 8, signal, SY_SIGNAL_SET, 1, 0, NULL), "src is NULL");
  REJECT(sy_put_signal(comm, plain, src, 8, signal, SY_SIGNAL_SET, 1, 0, NULL), "not inside one symmetric allocation");
  REJECT(sy_put_signal(comm, recv + RECV_BYTES - 4, src, 8, signal, SY_SIGNAL_SET, 1, 0, NULL),
         "not inside one symmetric allocation");
  REJECT(sy_put_signal(comm, recv, src, SIZE_MAX, signal, SY_SIGNAL_SET, 1, 0, NULL),
         "not inside one symmetric allocation");
  REJECT(sy_put_signal(comm, recv, src, 8, NULL, SY_SIGNAL_SET, 1, 0, NULL), "8-byte aligned");
  REJECT(sy_put_signal(comm, recv, src, 8, (uint64_t *)(heap_sig + 4), SY_SIGNAL_SET, 1, 0, NULL), "8-byte aligned");
  REJECT(sy_put_signal(comm, recv, src, 8, (uint64_t *)plain, SY_SIGNAL_SET, 1, 0, NULL),
         "not inside a symmetric allocation");
  REJECT(sy_put_signal(comm, recv, src, 8, (uint64_t *)(heap_sig + 16), SY_SIGNAL_SET, 1, 0, NULL),
         "not inside a symmetric allocation"); /* 4 bytes left in the allocation */
  CHECK(memcmp(recv, before, RECV_BYTES) == 0);
  CHECK(memcmp(heap_sig, sig_before, 20) == 0);
  REJECT(sy_signal_wait(NULL, signal, 0, NULL), "comm is NULL");
  REJECT(sy_signal_wait(comm, NULL, 0, NULL), "8-byte aligned");
  REJECT(sy_signal_wait(comm, (uint64_t *)(heap_sig + 4), 0, NULL), "8-byte aligned");
  REJECT(sy_signal_wait(comm, (uint64_t *)plain, 0, NULL), "not inside a symmetric allocation");

  /* All-to-all. */
  size_t one[1] = {16}, zero[1] = {0}, big[1] = {SIZE_MAX}, past[1] = {RECV_BYTES - 15}, almost[1] = {SIZE_MAX - 4};
  unsigned char send[64];
  fill(send, sizeof send, 5);
  REJECT(sy_alltoallv(NULL, send, one, zero, recv, one, zero, NULL), "comm is NULL");
  REJECT(sy_alltoallv(comm, send, NULL, zero, recv, one, zero, NULL), "all four arrays are required");
  REJECT(sy_alltoallv(comm, send, one, NULL, recv, one, zero, NULL), "all four arrays are required");
  REJECT(sy_alltoallv(comm, send, one, zero, recv, NULL, zero, NULL), "all four arrays are required");
  REJECT(sy_alltoallv(comm, send, one, zero, recv, one, NULL, NULL), "all four arrays are required");
  REJECT(sy_alltoallv(comm, NULL, one, zero, recv, one, zero, NULL), "send is NULL with send_bytes[0]=16");
  REJECT(sy_alltoallv(comm, send, one, zero, NULL, one, zero, NULL), "recv is NULL");
  REJECT(sy_alltoallv(comm, send, one, zero, plain, one, zero, NULL), "is not a symmetric allocation");
  REJECT(sy_alltoallv(comm, send, one, zero, recv, one, past, NULL),
         "recv_offsets[0]=4081 + recv_bytes[0]=16 runs past");
  REJECT(sy_alltoallv(comm, send, one, zero, recv + 4000, one, big, NULL), "overflows");
  REJECT(sy_alltoallv(comm, send, one, zero, recv + RECV_BYTES - 8, one, zero, NULL), "runs past");
  REJECT(sy_alltoallv(comm, send, one, big, recv, one, zero, NULL), "send_offsets[0]");
  REJECT(sy_alltoallv(comm, send, one, almost, recv, one, zero, NULL), "overflows");
  REJECT(sy_alltoall(NULL, send, recv, 16, NULL), "comm is NULL");
  REJECT(sy_alltoall(comm, send, plain, 16, NULL), "is not a symmetric allocation");
  REJECT(sy_alltoall(comm, send, recv, RECV_BYTES + 1, NULL), "runs past");
  REJECT(sy_alltoall(comm, NULL, recv, 16, NULL), "send is NULL");
  /* sy_alltoall's rejections name sy_alltoall and its bytes_per_rank, not the sy_alltoallv it builds. */
  REJECT(sy_alltoall(comm, send, recv, RECV_BYTES + 1, NULL),
         "sy_alltoall: invalid argument: bytes_per_rank=4097 x world_size=1 = 4097 bytes runs past");
  REJECT(sy_alltoall(comm, NULL, recv, 16, NULL), "sy_alltoall: invalid argument: send is NULL with bytes_per_rank=16");
  REJECT(sy_alltoall(comm, send, plain, 16, NULL), "sy_alltoall: invalid argument: recv=");
  /* The send side: a send buffer in a symmetric allocation (heap_sig, 20 bytes) keeps its ranges inside it;
   * no range runs past the end of the address space. */
  size_t eight[1] = {8};
  REJECT(sy_alltoallv(comm, heap_sig, one, eight, recv, one, zero, NULL),
         "send_offsets[0]=8 + send_bytes[0]=16 runs past send's symmetric allocation (20 bytes from send)");
  REJECT(sy_alltoall(comm, heap_sig, recv, 24, NULL),
         "sy_alltoall: invalid argument: bytes_per_rank=24 x world_size=1 = 24 bytes runs past send's symmetric");
  REJECT(sy_alltoallv(comm, (const void *)(UINTPTR_MAX - 7), one, zero, recv, one, zero, NULL),
         "send_bytes[0]=16 runs past the end of the address space");
  CHECK(memcmp(recv, before, RECV_BYTES) == 0);
  CHECK(memcmp(heap_sig, sig_before, 20) == 0);

  /* Still healthy after all of that: rejections are not errors of the communicator. */
  st = SY_ERR_INTERNAL;
  CHECK_OK(sy_comm_async_error(comm, &st, NULL, 0));
  CHECK_EQ_INT(st, SY_SUCCESS);
  CHECK_OK(sy_alltoallv(comm, send, one, zero, recv, one, zero, NULL));
  CHECK(memcmp(recv, send, 16) == 0 && memcmp(recv + 16, before + 16, RECV_BYTES - 16) == 0);
  CHECK_OK(sy_put_signal(comm, recv, src, 8, signal, SY_SIGNAL_ADD, 3, 0, NULL));
  CHECK_OK(sy_comm_destroy(comm));
  free(plain);
}

/* ---- two ranks: what needs a peer, and the mismatched pair ---------------------------------------------- */

/* After a sticky error (SY_ERR_MISMATCH here): what init or a configuration fixed still answers, so the caller
 * can say who failed; whatever would touch a peer, the heap or a stream returns the error. */
static void sticky_rank_checks(int me, sy_comm_t comm, unsigned char *recv) {
  int value = -1;
  sy_backend_t backend = SY_BACKEND_AUTO;
  CHECK_OK(sy_comm_rank(comm, &value));
  CHECK_EQ_INT(value, me);
  CHECK_OK(sy_comm_size(comm, &value));
  CHECK_EQ_INT(value, 2);
  CHECK_OK(sy_comm_backend(comm, &backend));
  CHECK_EQ_INT(backend, SY_BACKEND_HOST);
  CHECK_OK(sy_comm_device(comm, &value));
  CHECK_EQ_INT(value, -1);
  size_t bytes = 0;
  sy_moe_config_t moe = SY_MOE_CONFIG_INIT;
  moe.max_tokens = 4, moe.hidden = 128, moe.top_k = 2, moe.num_experts = 4;
  CHECK_OK(sy_moe_workspace_size(comm, &moe, &bytes));
  CHECK(bytes > 0);
  sy_attn_config_t attn = SY_ATTN_CONFIG_INIT;
  attn.max_tokens = 8, attn.max_replicas = 2, attn.max_kv_grad_row_bytes = 16;
  CHECK_OK(sy_attn_workspace_size(comm, &attn, &bytes));
  CHECK_EQ_INT(bytes, 256);
  void *p = (void *)&value;
  CHECK_STATUS(sy_comm_peer_ptr(comm, recv, 1 - me, &p), SY_ERR_MISMATCH);
  CHECK(p == (void *)&value); /* untouched */
  CHECK_STATUS(sy_mem_alloc(comm, 64, &p), SY_ERR_MISMATCH);
  CHECK(p == NULL); /* a failed allocation sets its output to NULL (switchyard.h), the guard's refusal included */
  CHECK_STATUS(sy_comm_barrier(comm, NULL), SY_ERR_MISMATCH);
  CHECK_STATUS(sy_comm_allgather_host(comm, &value, recv, sizeof value), SY_ERR_MISMATCH);
  CHECK_STATUS(sy_alltoall(comm, recv, recv + 64, 16, NULL), SY_ERR_MISMATCH);
}

typedef struct rank_ctx {
  int rank;
  pthread_t thread;
} rank_ctx_t;

static void *two_rank_main(void *arg) {
  rank_ctx_t *ctx = arg;
  const int me = ctx->rank;
  sy_comm_config_t config = make_config(me, 2, 3002);
  sy_comm_t comm = NULL;
  CHECK_OK(sy_comm_init(&comm, &config));
  if (!comm) return NULL;
  unsigned char *recv = NULL;
  CHECK_OK(sy_mem_alloc(comm, RECV_BYTES, (void **)&recv));
  if (!recv) return NULL;
  unsigned char before[RECV_BYTES], send[256];
  fill(recv, RECV_BYTES, 10 + (unsigned)me);
  fill(send, sizeof send, 20 + (unsigned)me);
  memcpy(before, recv, RECV_BYTES);

  if (me == 0) { /* rank 1 waits in the barrier below, so these log lines are rank 0's alone */
    size_t bytes[2] = {16, 16}, zeros[2] = {0, 0}, overlap[2] = {0, 8};
    void *p = (void *)1;
    REJECT(sy_comm_peer_ptr(comm, recv, 2, &p), "peer=2");
    REJECT(sy_put_signal(comm, recv, send, 8, (uint64_t *)recv, SY_SIGNAL_SET, 1, 2, NULL), "peer=2");
    REJECT(sy_alltoallv(comm, send, bytes, zeros, recv, bytes, overlap, NULL),
           "receive ranges of peers 0 and 1 overlap");
    REJECT(sy_alltoallv(comm, send, bytes, zeros, recv, bytes, zeros, NULL), "overlap");
    /* in place: a send range over a receive range (sent bytes would be overwritten by a peer's while read) */
    size_t lo_hi[2] = {0, 16}, hi_lo[2] = {16, 0}, edge[2] = {32, 48};
    REJECT(sy_alltoall(comm, recv, recv, 16, NULL), "overlaps the receive range of peer 0");
    REJECT(sy_alltoallv(comm, recv, bytes, hi_lo, recv, bytes, lo_hi, NULL),
           "send_offsets[0]=16 + send_bytes[0]=16 overlaps the receive range of peer 1 (recv_offsets 16 + 16)");
    REJECT(sy_alltoallv(comm, recv + 40, bytes, zeros, recv, bytes, edge, NULL), "no in-place all-to-all");
    REJECT(sy_alltoall(comm, send, recv, SIZE_MAX / 2 + 1, NULL), "bytes_per_rank");
    REJECT(sy_alltoall(comm, send, recv, RECV_BYTES / 2 + 1, NULL), "runs past");
    /* Counts whose sum wraps are named, whichever side: no check is skipped because a sum came out small. */
    size_t half[2] = {(size_t)1 << 63, (size_t)1 << 63}, apart[2] = {0, 100};
    REJECT(sy_alltoallv(comm, send, bytes, zeros, NULL, half, zeros, NULL),
           "recv_bytes[1]=9223372036854775808: the sum of recv_bytes overflows (9223372036854775808 before it)");
    REJECT(sy_alltoallv(comm, send, bytes, zeros, recv, half, zeros, NULL), "the sum of recv_bytes overflows");
    REJECT(sy_alltoallv(comm, send, half, zeros, recv, bytes, apart, NULL),
           "send_bytes[1]=9223372036854775808: the sum of send_bytes overflows");
    CHECK(memcmp(recv, before, RECV_BYTES) == 0);
  }
  CHECK_OK(sy_comm_barrier(comm, NULL));

  /* Issue 18's reproduction on both ranks: the pairs agree, the receive counts sum to 2^64 = 0 and recv is
   * NULL. Rejected on each rank before anything is exchanged; the communicator stays healthy. */
  {
    static char small_send[16];
    size_t huge[2] = {(size_t)1 << 63, (size_t)1 << 63}, offs[2] = {0, 0};
    CHECK_STATUS(sy_alltoallv(comm, small_send, huge, offs, NULL, huge, offs, NULL), SY_ERR_INVALID_ARG);
    CHECK_STATUS(sy_alltoallv(comm, small_send, huge, offs, recv, huge, offs, NULL), SY_ERR_INVALID_ARG);
    CHECK(memcmp(recv, before, RECV_BYTES) == 0);
  }
  CHECK_OK(sy_comm_barrier(comm, NULL));

  /* The mismatched pair: rank 0 sends 10 bytes to rank 1, which expects 12. Everything else agrees. */
  size_t send_bytes[2], recv_bytes[2], send_offsets[2] = {0, 100}, recv_offsets[2] = {0, 1000};
  send_bytes[0] = recv_bytes[0] = 5;
  send_bytes[1] = me == 0 ? 10 : 7;
  recv_bytes[1] = me == 0 ? 7 : 0;
  if (me == 1) {
    recv_bytes[0] = 12; /* from rank 0 */
    send_bytes[0] = 7;  /* to rank 0: agrees with rank 0's recv_bytes[1] */
    send_bytes[1] = 0;  /* to itself */
  }
  CHECK_STATUS(sy_alltoallv(comm, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets, NULL),
               SY_ERR_MISMATCH);
  CHECK(memcmp(recv, before, RECV_BYTES) == 0); /* nothing copied anywhere, the agreeing pairs neither */

  /* Sticky, as on the cuda backend (where it arrives through the async error): only destroy is accepted. */
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  CHECK_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  CHECK_EQ_INT(async, SY_ERR_MISMATCH);
  CHECK(strstr(detail, "disagree") != NULL);
  if (me == 1) recv_bytes[0] = 10;
  CHECK_STATUS(sy_alltoallv(comm, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets, NULL),
               SY_ERR_MISMATCH);
  CHECK(memcmp(recv, before, RECV_BYTES) == 0);
  sticky_rank_checks(me, comm, recv);
  CHECK_OK(sy_comm_destroy(comm));
  return NULL;
}

static void test_two_ranks(void) {
  rank_ctx_t ctx[2];
  for (int r = 0; r < 2; r++) {
    ctx[r].rank = r;
    CHECK_EQ_INT(pthread_create(&ctx[r].thread, NULL, two_rank_main, &ctx[r]), 0);
  }
  for (int r = 0; r < 2; r++) pthread_join(ctx[r].thread, NULL);
  CHECK(check_log_has("rank 0 sends 10 bytes to rank 1, which expects 12", __LINE__));
}

int main(void) {
  char dir[] = "/tmp/sy_test_bad_args_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  test_init_args();
  test_single_rank_args();
  test_two_ranks();

  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  return check_report();
}
