/*
 * alltoall.c — the public all-to-all entry points, sy_alltoallv and sy_alltoall: every byte count, offset and
 * buffer range checked here, once, before the backend (host/alltoall.c, cuda/alltoall.cu) sees the call. A count,
 * an offset, an offset plus its count or a sum of counts that does not fit a size_t is rejected before anything
 * else is looked at, so no later check can be skipped by a value that wrapped; each rejection names the
 * function the caller called.
 */
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>

static int compare_ranges(const void *a, const void *b) {
  const size_t *x = a, *y = b; /* {offset, bytes, peer} */
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The bytes from ptr to the end of the symmetric allocation holding it, or 0 when ptr is in none. */
static size_t symm_room(sy_comm_t comm, const void *ptr) {
  const sy_symm_block_t *b = ptr ? sy__symm_find(comm, ptr, 0) : NULL;
  return b ? b->bytes - (size_t)((const char *)ptr - (const char *)b->ptr) : 0;
}

/* One side's counts and offsets (side: "send" or "recv"): every offset + count and the sum of the counts fit a
 * size_t. *total: the sum. */
static sy_status_t check_sizes(const char *side, const size_t *bytes, const size_t *offsets, int world, size_t *total,
                               const char *fn) {
  size_t sum = 0;
  for (int p = 0; p < world; p++) {
    SY_ARG_CHECK(offsets[p] <= SIZE_MAX - bytes[p], fn, "%s_offsets[%d]=%zu + %s_bytes[%d]=%zu overflows", side, p,
                 offsets[p], side, p, bytes[p]);
    SY_ARG_CHECK(bytes[p] <= SIZE_MAX - sum, fn, "%s_bytes[%d]=%zu: the sum of %s_bytes overflows (%zu before it)",
                 side, p, bytes[p], side, sum);
    sum += bytes[p];
  }
  *total = sum;
  return SY_SUCCESS;
}

/* The send side: send non-NULL where bytes leave; every range inside the address space and, when send lies in a
 * symmetric allocation, inside that allocation. Send ranges may overlap (the same bytes may go to several peers). */
static sy_status_t check_send(sy_comm_t comm, const void *send, const size_t *bytes, const size_t *offsets,
                              const char *fn) {
  size_t total;
  SY_CHECK(check_sizes("send", bytes, offsets, comm->world_size, &total, fn));
  if (total == 0) return SY_SUCCESS; /* no sum wrapped, so every count is 0: nothing is read */
  const size_t room = symm_room(comm, send);
  for (int p = 0; p < comm->world_size; p++) {
    if (!bytes[p]) continue;
    SY_ARG_CHECK(send != NULL, fn, "send is NULL with send_bytes[%d]=%zu", p, bytes[p]);
    SY_ARG_CHECK((uintptr_t)send <= UINTPTR_MAX - (offsets[p] + bytes[p]), fn,
                 "send=%p + send_offsets[%d]=%zu + send_bytes[%d]=%zu runs past the end of the address space", send, p,
                 offsets[p], p, bytes[p]);
    SY_ARG_CHECK(
        room == 0 || offsets[p] + bytes[p] <= room, fn,
        "send_offsets[%d]=%zu + send_bytes[%d]=%zu runs past send's symmetric allocation (%zu bytes from send)", p,
        offsets[p], p, bytes[p], room);
  }
  return SY_SUCCESS;
}

/* The receive side: recv a symmetric allocation holding every non-empty range, the ranges apart from each other.
 * Empty ranges are not placed anywhere: their offsets are not looked at. *n: the non-empty ranges, left in
 * comm->a2a_scratch as {offset, bytes, peer} sorted by offset (for check_apart). */
static sy_status_t check_recv(sy_comm_t comm, void *recv, const size_t *bytes, const size_t *offsets, int *n_out,
                              const char *fn) {
  const int world = comm->world_size;
  size_t total;
  *n_out = 0;
  SY_CHECK(check_sizes("recv", bytes, offsets, world, &total, fn));
  if (total == 0) return SY_SUCCESS; /* no sum wrapped, so every count is 0: nothing is written */
  SY_ARG_CHECK(recv != NULL, fn, "recv is NULL while %zu bytes are to be received", total);
  const size_t room = symm_room(comm, recv);
  SY_ARG_CHECK(room > 0, fn, "recv=%p is not a symmetric allocation (use sy_mem_alloc)", recv);
  size_t *ranges = comm->a2a_scratch; /* 3 * world entries are free here */
  int n = 0;
  for (int p = 0; p < world; p++) {
    if (!bytes[p]) continue;
    SY_ARG_CHECK(offsets[p] + bytes[p] <= room, fn,
                 "recv_offsets[%d]=%zu + recv_bytes[%d]=%zu runs past the symmetric allocation (%zu bytes from recv)",
                 p, offsets[p], p, bytes[p], room);
    ranges[3 * n] = offsets[p];
    ranges[3 * n + 1] = bytes[p];
    ranges[3 * n + 2] = (size_t)p;
    n++;
  }
  qsort(ranges, (size_t)n, 3 * sizeof(size_t), compare_ranges); /* by offset: neighbours must not overlap */
  for (int i = 1; i < n; i++) {
    SY_ARG_CHECK(ranges[3 * (i - 1)] + ranges[3 * (i - 1) + 1] <= ranges[3 * i], fn,
                 "receive ranges of peers %zu and %zu overlap (recv_offsets %zu + %zu > %zu)", ranges[3 * (i - 1) + 2],
                 ranges[3 * i + 2], ranges[3 * (i - 1)], ranges[3 * (i - 1) + 1], ranges[3 * i]);
  }
  *n_out = n;
  return SY_SUCCESS;
}

/* No byte is both sent and received (an in-place all-to-all: a peer's rows would land where this rank's own
 * unsent rows are still read): each non-empty send range against the n sorted receive ranges check_recv left in
 * comm->a2a_scratch, by a binary search for the first one ending past its start. */
static sy_status_t check_apart(sy_comm_t comm, const void *send, const size_t *bytes, const size_t *offsets,
                               const void *recv, int n, const char *fn) {
  const size_t *ranges = comm->a2a_scratch;
  const uintptr_t r0 = (uintptr_t)recv;
  for (int p = 0; n > 0 && p < comm->world_size; p++) {
    if (!bytes[p]) continue;
    const uintptr_t s0 = (uintptr_t)send + offsets[p], s1 = s0 + bytes[p];
    int lo = 0, hi = n; /* the first receive range whose end is past s0 (the ranges' ends ascend) */
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (r0 + ranges[3 * mid] + ranges[3 * mid + 1] <= s0) lo = mid + 1;
      else hi = mid;
    }
    SY_ARG_CHECK(lo == n || r0 + ranges[3 * lo] >= s1, fn,
                 "send_offsets[%d]=%zu + send_bytes[%d]=%zu overlaps the receive range of peer %zu (recv_offsets %zu + "
                 "%zu): send and recv must not overlap (no in-place all-to-all)",
                 p, offsets[p], p, bytes[p], lo < n ? ranges[3 * lo + 2] : 0, lo < n ? ranges[3 * lo] : 0,
                 lo < n ? ranges[3 * lo + 1] : 0);
  }
  return SY_SUCCESS;
}

/* Both public calls end here: the stream and both sides checked, then the backend. */
static sy_status_t run_alltoallv(sy_comm_t comm, const sy_a2a_args_t *args, cudaStream_t stream, const char *fn) {
  SY_CHECK(sy__check_stream(comm, stream, fn));
  SY_CHECK(check_send(comm, args->send, args->send_bytes, args->send_offsets, fn));
  int n = 0;
  SY_CHECK(check_recv(comm, args->recv, args->recv_bytes, args->recv_offsets, &n, fn));
  SY_CHECK(check_apart(comm, args->send, args->send_bytes, args->send_offsets, args->recv, n, fn));
  return comm->ops->alltoallv(comm, args, stream);
}

sy_status_t sy_alltoallv(sy_comm_t comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                         void *recv, const size_t *recv_bytes, const size_t *recv_offsets, cudaStream_t stream) {
  static const char *fn = "sy_alltoallv";
  SY_COMM_GUARD(comm, fn);
  SY_ARG_CHECK(send_bytes && send_offsets && recv_bytes && recv_offsets, fn,
               "send_bytes=%p send_offsets=%p recv_bytes=%p recv_offsets=%p: all four arrays are required",
               (const void *)send_bytes, (const void *)send_offsets, (const void *)recv_bytes,
               (const void *)recv_offsets);
  const sy_a2a_args_t args = {send, recv, send_bytes, send_offsets, recv_bytes, recv_offsets};
  return run_alltoallv(comm, &args, stream, fn);
}

/* Checked in its own terms (bytes_per_rank), so that its rejections name what the caller passed; the ranges it
 * then builds pass sy_alltoallv's checks. */
sy_status_t sy_alltoall(sy_comm_t comm, const void *send, void *recv, size_t bytes_per_rank, cudaStream_t stream) {
  static const char *fn = "sy_alltoall";
  SY_COMM_GUARD(comm, fn);
  const int world = comm->world_size;
  SY_ARG_CHECK(bytes_per_rank <= SIZE_MAX / (size_t)world, fn, "bytes_per_rank=%zu times world_size=%d overflows",
               bytes_per_rank, world);
  const size_t total = bytes_per_rank * (size_t)world;
  if (total > 0) {
    SY_ARG_CHECK(send != NULL, fn, "send is NULL with bytes_per_rank=%zu", bytes_per_rank);
    SY_ARG_CHECK((uintptr_t)send <= UINTPTR_MAX - total, fn,
                 "send=%p + bytes_per_rank=%zu x world_size=%d runs past the end of the address space", send,
                 bytes_per_rank, world);
    const size_t send_room = symm_room(comm, send);
    SY_ARG_CHECK(send_room == 0 || total <= send_room, fn,
                 "bytes_per_rank=%zu x world_size=%d = %zu bytes runs past send's symmetric allocation (%zu bytes "
                 "from send)",
                 bytes_per_rank, world, total, send_room);
    SY_ARG_CHECK(recv != NULL, fn, "recv is NULL with bytes_per_rank=%zu", bytes_per_rank);
    const size_t room = symm_room(comm, recv);
    SY_ARG_CHECK(room > 0, fn, "recv=%p is not a symmetric allocation (use sy_mem_alloc)", recv);
    SY_ARG_CHECK(total <= room, fn,
                 "bytes_per_rank=%zu x world_size=%d = %zu bytes runs past the symmetric allocation (%zu bytes from "
                 "recv)",
                 bytes_per_rank, world, total, room);
  }
  /* a2a_scratch: [0, 3 world) is the receive check's scratch, then bytes, then offsets. */
  size_t *bytes = comm->a2a_scratch + 3 * (size_t)world, *offsets = bytes + world;
  for (int p = 0; p < world; p++) {
    bytes[p] = bytes_per_rank;
    offsets[p] = (size_t)p * bytes_per_rank;
  }
  const sy_a2a_args_t args = {send, recv, bytes, offsets, bytes, offsets};
  return run_alltoallv(comm, &args, stream, fn);
}
