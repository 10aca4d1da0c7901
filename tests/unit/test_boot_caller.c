/*
 * test_boot_caller.c — the caller's allgather as the bootstrap (sy_comm_config_t.allgather; src/boot's caller
 * kind), with ranks as threads meeting in memory:
 *   rounds      world 1, 2, 3 and 5, rounds of distinct data (0 to 4 KiB a rank) byte for byte, a barrier
 *   failure     a non-zero return is SY_ERR_BOOTSTRAP naming the value and the round, sticky: the function is not
 *               called again
 *   arguments   sy__boot_open_caller's, and sy_comm_init's: an allgather with rank -1 is refused naming it; the
 *               host backend never calls it
 */
#include "boot/boot.h"
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORLD  5
#define MAX_BYTES  4096
#define ROUNDS     6
#define FAIL_ROUND 2

/* The ranks' meeting place: each round every rank puts its bytes in slot[rank], all wait, all copy out. */
typedef struct meeting {
  int world;
  pthread_barrier_t barrier;
  unsigned char slot[MAX_WORLD][MAX_BYTES];
  size_t bytes[MAX_WORLD];
  int calls[MAX_WORLD]; /* each rank's calls of the function */
  int fail_rank;        /* this rank's function returns 5 from round FAIL_ROUND on; -1: none */
} meeting_t;

typedef struct caller {
  meeting_t *meeting;
  int rank;
} caller_t;

static int meet(void *user, const void *send, void *recv, size_t bytes) {
  caller_t *me = user;
  meeting_t *m = me->meeting;
  const int call = m->calls[me->rank]++;
  if (me->rank == m->fail_rank && call >= FAIL_ROUND) return 5;
  if (bytes > MAX_BYTES) return 1;
  if (bytes) memcpy(m->slot[me->rank], send, bytes);
  m->bytes[me->rank] = bytes;
  pthread_barrier_wait(&m->barrier);
  int ok = 1;
  for (int r = 0; r < m->world; r++) {
    ok &= m->bytes[r] == bytes;
    if (bytes) memcpy((unsigned char *)recv + (size_t)r * bytes, m->slot[r], bytes);
  }
  pthread_barrier_wait(&m->barrier); /* nobody overwrites a slot before everyone has read it */
  return ok ? 0 : 2;
}

static unsigned char pattern(int round, int rank, size_t i) { return (unsigned char)(round * 31 + rank * 7 + i * 13); }

static const size_t round_bytes[ROUNDS] = {0, 1, 7, 64, 1000, MAX_BYTES};

static void *rank_rounds(void *arg) {
  caller_t *me = arg;
  const int world = me->meeting->world;
  sy_boot_t *boot = NULL;
  CHECK_OK(sy__boot_open_caller(meet, me, me->rank, world, &boot));
  if (!boot) return NULL;
  unsigned char *send = malloc(MAX_BYTES), *recv = malloc((size_t)MAX_WORLD * MAX_BYTES);
  for (int round = 0; round < ROUNDS; round++) {
    const size_t n = round_bytes[round];
    for (size_t i = 0; i < n; i++) send[i] = pattern(round, me->rank, i);
    memset(recv, 0xEE, (size_t)MAX_WORLD * MAX_BYTES); /* poisoned: an unwritten byte shows */
    CHECK_OK(sy__boot_allgather(boot, send, recv, n));
    int wrong = 0;
    for (int r = 0; r < world; r++)
      for (size_t i = 0; i < n; i++) wrong += recv[(size_t)r * n + i] != pattern(round, r, i);
    CHECK_EQ_INT(wrong, 0);
  }
  CHECK_OK(sy__boot_barrier(boot));
  sy__boot_close(boot);
  free(send);
  free(recv);
  return NULL;
}

static void test_rounds(void) {
  static const int worlds[] = {1, 2, 3, MAX_WORLD};
  for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
    meeting_t *m = calloc(1, sizeof *m);
    m->world = worlds[w];
    m->fail_rank = -1;
    pthread_barrier_init(&m->barrier, NULL, (unsigned)m->world);
    caller_t callers[MAX_WORLD];
    pthread_t threads[MAX_WORLD];
    for (int r = 0; r < m->world; r++) {
      callers[r] = (caller_t){m, r};
      CHECK(pthread_create(&threads[r], NULL, rank_rounds, &callers[r]) == 0);
    }
    for (int r = 0; r < m->world; r++) pthread_join(threads[r], NULL);
    for (int r = 0; r < m->world; r++) CHECK_EQ_INT(m->calls[r], ROUNDS + 1); /* the rounds and the barrier */
    pthread_barrier_destroy(&m->barrier);
    free(m);
  }
}

static void test_failure(void) {
  meeting_t *m = calloc(1, sizeof *m);
  m->world = 1;
  m->fail_rank = 0;
  pthread_barrier_init(&m->barrier, NULL, 1);
  caller_t me = {m, 0};
  sy_boot_t *boot = NULL;
  CHECK_OK(sy__boot_open_caller(meet, &me, 0, 1, &boot));
  unsigned char send[8] = {1, 2, 3, 4, 5, 6, 7, 8}, recv[8];
  for (int round = 0; round < FAIL_ROUND; round++) CHECK_OK(sy__boot_allgather(boot, send, recv, sizeof send));
  CHECK_STATUS(sy__boot_allgather(boot, send, recv, sizeof send), SY_ERR_BOOTSTRAP);
  CHECK(strstr(sy_last_error(), "the caller's allgather (sy_comm_config_t.allgather) returned 5 in round 2") != NULL);
  CHECK_STATUS(sy__boot_allgather(boot, send, recv, sizeof send), SY_ERR_BOOTSTRAP); /* sticky */
  CHECK_EQ_INT(m->calls[0], FAIL_ROUND + 1);
  sy__boot_close(boot);
  pthread_barrier_destroy(&m->barrier);
  free(m);
}

static int never_called(void *user, const void *send, void *recv, size_t bytes) {
  (void)send, (void)recv, (void)bytes;
  (*(int *)user)++;
  return 1;
}

static void test_arguments(void) {
  int calls = 0;
  sy_boot_t *boot = NULL;
  CHECK_STATUS(sy__boot_open_caller(NULL, NULL, 0, 1, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_caller(never_called, &calls, 2, 2, &boot), SY_ERR_INVALID_ARG);
  CHECK(strstr(sy_last_error(), "rank=2 must be in [0, 2)") != NULL);
  CHECK(boot == NULL);

  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  CHECK(config.allgather == NULL && config.allgather_user == NULL);
  config.allgather = never_called;
  config.allgather_user = &calls;
  sy_comm_t comm = NULL;
  CHECK_STATUS(sy_comm_init(&comm, &config), SY_ERR_INVALID_ARG);
  CHECK(strstr(sy_last_error(), "config->allgather is set but config->rank=-1") != NULL);
  CHECK(comm == NULL);

  /* the host backend's ranks meet in the process: the function is never called */
  config.backend = SY_BACKEND_HOST;
  config.rank = 0;
  config.world_size = 1;
  config.host_group = 7300;
  CHECK_OK(sy_comm_init(&comm, &config));
  int mine = 42, all = 0;
  CHECK_OK(sy_comm_allgather_host(comm, &mine, &all, sizeof mine));
  CHECK_EQ_INT(all, 42);
  CHECK_OK(sy_comm_destroy(comm));
  CHECK_EQ_INT(calls, 0);
}

int main(void) {
  test_rounds();
  test_failure();
  test_arguments();
  return check_report();
}
