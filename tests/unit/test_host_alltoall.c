/*
 * test_host_alltoall.c — sy_alltoallv and sy_alltoall on the host backend against an expectation computed
 * here, independently of src/ref: seeded random uneven sizes (0 and odd counts included), scattered send and
 * receive placements with gaps, payloads that encode (source, destination, byte, seed, round) and are never
 * zero, receive buffers poisoned first so unwritten gaps show, many rounds back to back.
 * SY_TEST_SEED overrides the seed; a failure prints it.
 */
#include "check.h"
#include "switchyard.h"
#include "workload.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS      8
#define MAX_PAIR_BYTES 3000 /* per (source, destination) pair, exclusive */
#define MAX_GAP        64
#define MAX_SHIFT      1024 /* recv may start this far inside its allocation */
#define RECV_ALLOC     (MAX_RANKS * (MAX_PAIR_BYTES + MAX_GAP) + MAX_SHIFT + 512)
#define SEND_BYTES     (MAX_RANKS * (MAX_PAIR_BYTES + MAX_GAP) + 512)
#define ROUNDS         30

static uint64_t seed = 0x5717c4ad5eedull;

static uint64_t hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return wl_mix(wl_mix(wl_mix(wl_mix(seed ^ a) ^ b) ^ c) ^ d);
}

/* Bytes source s sends destination p in round `round`: about one pair in five sends nothing. */
static size_t pair_bytes(int world, int round, int s, int p) {
  uint64_t h = hash4(1, (uint64_t)world, (uint64_t)round, (uint64_t)(s * MAX_RANKS + p));
  if (h % 5 == 0) return 0;
  if (h % 7 == 0) return 1;
  return (size_t)((h >> 8) % MAX_PAIR_BYTES);
}

/* Payload byte i of the s -> p message: never zero. */
static unsigned char payload(int round, int s, int p, size_t i) {
  uint64_t h = wl_mix(((uint64_t)round << 48) ^ ((uint64_t)s << 40) ^ ((uint64_t)p << 32) ^ (uint64_t)i ^ seed);
  return (unsigned char)(h % 255 + 1);
}

/* A random placement of `world` ranges with sizes bytes[] in a random order with random gaps; returns the
 * end. tag separates the send side from the receive side. */
static size_t place(int world, int round, int rank, int tag, const size_t *bytes, size_t *offsets) {
  int order[MAX_RANKS];
  for (int i = 0; i < world; i++) order[i] = i;
  for (int i = world - 1; i > 0; i--) { /* Fisher-Yates */
    int j = (int)(hash4(2 + (uint64_t)tag, (uint64_t)round, (uint64_t)rank, (uint64_t)i) % (uint64_t)(i + 1));
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  size_t at = (size_t)(hash4(4 + (uint64_t)tag, (uint64_t)round, (uint64_t)rank, 99) % MAX_GAP);
  for (int i = 0; i < world; i++) {
    int peer = order[i];
    offsets[peer] = at;
    at += bytes[peer] + (size_t)(hash4(6 + (uint64_t)tag, (uint64_t)round, (uint64_t)rank, (uint64_t)peer) % MAX_GAP);
  }
  return at;
}

typedef struct rank_ctx {
  int rank, world, group;
  pthread_t thread;
} rank_ctx_t;

static sy_comm_t open_comm(const rank_ctx_t *ctx) {
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = ctx->rank;
  config.world_size = ctx->world;
  config.host_group = ctx->group;
  config.timeout_ms = 30000;
  sy_comm_t comm = NULL;
  CHECK_OK(sy_comm_init(&comm, &config));
  return comm;
}

/* Compares recv (RECV bytes from base) with expect and reports the first difference. */
static int compare_image(const unsigned char *got, const unsigned char *expect, size_t bytes, const char *what,
                         int world, int round, int rank) {
  if (!memcmp(got, expect, bytes)) return 0;
  for (size_t i = 0; i < bytes; i++) {
    if (got[i] != expect[i]) {
      fprintf(stderr, "%s: world %d round %d rank %d: byte %zu is 0x%02x, want 0x%02x (seed 0x%llx)\n", what, world,
              round, rank, i, got[i], expect[i], (unsigned long long)seed);
      break;
    }
  }
  return 1;
}

static void *alltoallv_rank(void *arg) {
  rank_ctx_t *ctx = arg;
  const int world = ctx->world, me = ctx->rank;
  sy_comm_t comm = open_comm(ctx);
  if (!comm) return NULL;
  unsigned char *base = NULL;
  CHECK_OK(sy_mem_alloc(comm, RECV_ALLOC, (void **)&base));
  unsigned char *send = malloc(SEND_BYTES), *send_copy = malloc(SEND_BYTES), *expect = malloc(RECV_ALLOC);
  if (!base || !send || !send_copy || !expect) goto done;
  int wrong = 0;
  for (int round = 0; round < ROUNDS; round++) {
    size_t send_bytes[MAX_RANKS], send_offsets[MAX_RANKS], recv_bytes[MAX_RANKS], recv_offsets[MAX_RANKS];
    for (int p = 0; p < world; p++) {
      send_bytes[p] = pair_bytes(world, round, me, p);
      recv_bytes[p] = pair_bytes(world, round, p, me);
    }
    size_t send_end = place(world, round, me, 0, send_bytes, send_offsets);
    size_t recv_end = place(world, round, me, 1, recv_bytes, recv_offsets);
    CHECK(send_end <= SEND_BYTES);
    /* Every third round recv starts inside the allocation rather than at its base. */
    size_t shift = round % 3 == 1 ? (size_t)(hash4(8, (uint64_t)round, (uint64_t)me, 0) % MAX_SHIFT) : 0;
    CHECK(shift + recv_end <= RECV_ALLOC);
    unsigned char *recv = base + shift;

    /* Send: gaps hold filler, so reading the wrong offset shows. */
    memset(send, 0x5A, SEND_BYTES);
    for (int p = 0; p < world; p++)
      for (size_t i = 0; i < send_bytes[p]; i++) send[send_offsets[p] + i] = payload(round, me, p, i);
    memcpy(send_copy, send, SEND_BYTES);
    unsigned char poison = (unsigned char)(0xE0 + round % 16);
    memset(base, poison, RECV_ALLOC);

    /* The expectation, from the generator alone. */
    memset(expect, poison, RECV_ALLOC);
    for (int s = 0; s < world; s++)
      for (size_t i = 0; i < recv_bytes[s]; i++) expect[shift + recv_offsets[s] + i] = payload(round, s, me, i);

    const size_t row = (size_t)world * sizeof(size_t);
    size_t args_copy[4][MAX_RANKS];
    memcpy(args_copy[0], send_bytes, row);
    memcpy(args_copy[1], send_offsets, row);
    memcpy(args_copy[2], recv_bytes, row);
    memcpy(args_copy[3], recv_offsets, row);
    CHECK_OK(sy_alltoallv(comm, send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets, NULL));
    wrong += compare_image(base, expect, RECV_ALLOC, "alltoallv", world, round, me);
    CHECK(memcmp(send, send_copy, SEND_BYTES) == 0); /* send is read only */
    CHECK(memcmp(args_copy[0], send_bytes, row) == 0 && memcmp(args_copy[1], send_offsets, row) == 0 &&
          memcmp(args_copy[2], recv_bytes, row) == 0 && memcmp(args_copy[3], recv_offsets, row) == 0);
    /* No barrier here: the next round rewrites send and recv at once, as a caller may. */
  }
  CHECK_EQ_INT(wrong, 0);

  /* sy_alltoall: equal splits, packed in rank order on both sides, odd size. */
  for (int round = 100; round < 103; round++) {
    const size_t per = round == 100 ? 37 : round == 101 ? 1 : 1024;
    for (int p = 0; p < world; p++)
      for (size_t i = 0; i < per; i++) send[(size_t)p * per + i] = payload(round, me, p, i);
    memset(base, 0xC3, RECV_ALLOC);
    memset(expect, 0xC3, RECV_ALLOC);
    for (int s = 0; s < world; s++)
      for (size_t i = 0; i < per; i++) expect[(size_t)s * per + i] = payload(round, s, me, i);
    CHECK_OK(sy_alltoall(comm, send, base, per, NULL));
    CHECK_EQ_INT(compare_image(base, expect, RECV_ALLOC, "alltoall", world, round, me), 0);
  }

  /* Nothing anywhere: recv untouched, and NULL buffers accepted. */
  size_t zeros[MAX_RANKS] = {0}, offs[MAX_RANKS];
  for (int p = 0; p < world; p++) offs[p] = (size_t)p * 10;
  memset(base, 0x77, RECV_ALLOC);
  memset(expect, 0x77, RECV_ALLOC);
  CHECK_OK(sy_alltoallv(comm, send, zeros, offs, base, zeros, offs, NULL));
  CHECK_OK(sy_alltoallv(comm, NULL, zeros, zeros, NULL, zeros, zeros, NULL));
  CHECK_OK(sy_alltoall(comm, NULL, NULL, 0, NULL));
  CHECK_OK(sy_alltoall(comm, send, base, 0, NULL));
  CHECK_EQ_INT(compare_image(base, expect, RECV_ALLOC, "alltoall zero", world, 0, me), 0);

  sy_status_t async = SY_ERR_INTERNAL;
  CHECK_OK(sy_comm_async_error(comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_SUCCESS);
  CHECK_OK(sy_mem_free(comm, base));
done:
  free(send);
  free(send_copy);
  free(expect);
  CHECK_OK(sy_comm_destroy(comm));
  return NULL;
}

int main(void) {
  const char *env = getenv("SY_TEST_SEED");
  if (env && *env) seed = strtoull(env, NULL, 0);
  printf("seed 0x%llx\n", (unsigned long long)seed);
  static const int worlds[] = {1, 2, 3, 4, 8};
  for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
    rank_ctx_t ctx[MAX_RANKS];
    for (int r = 0; r < worlds[w]; r++) {
      ctx[r] = (rank_ctx_t){r, worlds[w], 2000 + worlds[w], 0};
      CHECK_EQ_INT(pthread_create(&ctx[r].thread, NULL, alltoallv_rank, &ctx[r]), 0);
    }
    for (int r = 0; r < worlds[w]; r++) pthread_join(ctx[r].thread, NULL);
  }
  return check_report();
}
