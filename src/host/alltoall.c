/*
 * alltoall.c — sy_alltoallv on the host backend: one exchange (every rank publishes its checked arguments; a
 * peer inside another collective is SY_ERR_MISMATCH everywhere, group.c), the same verdict on every rank (a pair
 * whose byte counts disagree is SY_ERR_MISMATCH everywhere, nothing copied), each receiver pulls its bytes from
 * the senders' buffers with src/ref's reference loop in bounded pieces (sy__host_copy), and the exchange's
 * closing round, so that no sender returns (and reuses or frees its buffer) while a peer still reads it: not
 * even when that round times out, which ends the copies at the next piece and waits for them to stop.
 */
#include "host/host.h"
#include "ref/alltoall_ref.h"

#include <stdio.h>
#include <string.h>

/* Logs up to a few disagreeing pairs; returns how many pairs disagree. */
static int a2a_check_pairs(sy_comm_t comm) {
  host_state_t *hs = comm->backend_state;
  const int world = hs->world;
  int bad = 0;
  char pairs[320];
  size_t n = 0;
  pairs[0] = '\0';
  for (int s = 0; s < world; s++) {
    const sy_a2a_args_t *sender = sy__host_exchange_slot(comm, s);
    for (int p = 0; p < world; p++) {
      const sy_a2a_args_t *receiver = sy__host_exchange_slot(comm, p);
      if (sender->send_bytes[p] == receiver->recv_bytes[s]) continue;
      if (bad < 4 && n < sizeof pairs) {
        int w = snprintf(pairs + n, sizeof pairs - n, "%srank %d sends %zu bytes to rank %d, which expects %zu",
                         bad ? "; " : "", s, sender->send_bytes[p], p, receiver->recv_bytes[s]);
        if (w > 0) n += (size_t)w;
      }
      bad++;
    }
  }
  if (bad)
    SY_WARN("alltoallv: call %llu: %d pair(s) of ranks disagree on the byte counts (%s%s); nothing copied",
            (unsigned long long)hs->a2a_calls, bad, pairs, bad > 4 ? "; ..." : "");
  return bad;
}

sy_status_t sy__host_alltoallv(sy_comm_t comm, const sy_a2a_args_t *args, cudaStream_t stream) {
  host_state_t *hs = comm->backend_state;
  const int world = hs->world;
  hs->a2a_calls++;
  SY_CHECK(sy__host_exchange_begin(comm, SY_HOST_OP_ALLTOALLV, args));
  /* Every rank sees the same published arguments, so every rank reaches the same verdict. */
  sy_status_t verdict = a2a_check_pairs(comm) ? SY_ERR_MISMATCH : SY_SUCCESS;
  /* Sticky, as on the cuda backend, where the kernel reports it through the error slot. */
  if (verdict != SY_SUCCESS)
    sy__comm_set_error(comm, verdict, "alltoallv: call %llu: ranks disagree on the byte counts of a pair (see log)",
                       (unsigned long long)hs->a2a_calls);
  if (verdict == SY_SUCCESS) {
    for (int s = 0; s < world; s++) {
      const sy_a2a_args_t *sender = sy__host_exchange_slot(comm, s);
      hs->a2a_send[s] = sender->send;
      memcpy(hs->a2a_send_bytes + (size_t)s * world, sender->send_bytes, (size_t)world * sizeof(size_t));
      memcpy(hs->a2a_send_offsets + (size_t)s * world, sender->send_offsets, (size_t)world * sizeof(size_t));
    }
    /* Stops at the abort (SY_ERR_ABORTED) with the rest not copied. */
    verdict =
        (sy_status_t)sy__ref_alltoallv_recv_by(world, hs->rank, hs->a2a_send, hs->a2a_send_bytes, hs->a2a_send_offsets,
                                               args->recv, args->recv_offsets, sy__host_copy, comm);
  }
  /* No sender returns (and reuses its send buffer or arguments) before every receiver has stopped copying. */
  SY_CHECK(sy__host_exchange_end(comm));
  return verdict;
}
