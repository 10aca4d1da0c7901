/*
 * comm.c — the `host` backend's communicator: ranks are threads of one process, the "symmetric heap" is
 * ordinary memory every thread can see, and every operation is a plain C loop over src/ref's rules. It is the
 * oracle the GPU tests compare against and what CI runs, so it keeps the header's semantics exactly:
 * collectives agree on their arguments or fail on every rank with nothing done (ranks inside different
 * collectives: SY_ERR_MISMATCH everywhere), and every wait is bounded; a wait that times out aborts the whole
 * group so no peer hangs either, yet no rank returns while a peer still copies from its buffers (group.c). Each
 * collective here is one exchange of the group (the public barrier one checked round). Here: symmetric memory (a
 * block per collective allocation, every rank's copy addressable by every rank), signals, the host allgather,
 * the backend table and init.
 */
#include "host/host.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOST_ALIGN  256
#define HOST_POISON 0xA5 /* fresh allocations: contents are undefined, and must not look like zeros */

/* ---- symmetric blocks ------------------------------------------------------------------------------------- */

static host_block_t *block_containing(host_state_t *hs, const void *ptr, size_t *offset) {
  uintptr_t p = (uintptr_t)ptr;
  for (int i = 0; i < hs->block_count; i++) {
    uintptr_t base = (uintptr_t)hs->blocks[i].ptrs[hs->rank];
    if (p >= base && p - base < hs->blocks[i].bytes) {
      *offset = (size_t)(p - base);
      return &hs->blocks[i];
    }
  }
  return NULL;
}

/* ptr as peer sees it, or NULL when ptr is not inside one of this rank's symmetric allocations. */
static void *translate(host_state_t *hs, const void *ptr, int peer) {
  size_t offset;
  host_block_t *b = block_containing(hs, ptr, &offset);
  return b ? (char *)b->ptrs[peer] + offset : NULL;
}

/* ---- ops ---------------------------------------------------------------------------------------------- */

typedef struct alloc_offer {
  size_t bytes;
  void *ptr;
  sy_status_t status;
} alloc_offer_t;

static sy_status_t host_mem_alloc(sy_comm_t comm, size_t bytes, void **ptr) {
  host_state_t *hs = comm->backend_state;
  const int world = hs->world;
  alloc_offer_t offer = {bytes, NULL, SY_SUCCESS};
  void **ptrs = NULL;
  /* Everything that can fail locally happens before the exchange, so the group decides once, together. */
  size_t reserved = bytes <= SIZE_MAX - (HOST_ALIGN - 1) ? (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN : 0;
  if (reserved == 0 || reserved > hs->heap_bytes - hs->heap_used) {
    SY_INFO("mem_alloc: %zu bytes do not fit the symmetric heap (%zu of %zu bytes in use)", bytes, hs->heap_used,
            hs->heap_bytes);
    offer.status = SY_ERR_NO_MEMORY;
  } else if (hs->block_count == hs->block_capacity) {
    int cap = hs->block_capacity ? 2 * hs->block_capacity : 8;
    host_block_t *grown = realloc(hs->blocks, (size_t)cap * sizeof *grown);
    if (grown) {
      hs->blocks = grown;
      hs->block_capacity = cap;
    } else {
      offer.status = SY_ERR_NO_MEMORY;
    }
  }
  if (offer.status == SY_SUCCESS) {
    ptrs = calloc((size_t)world, sizeof *ptrs);
    offer.ptr = aligned_alloc(HOST_ALIGN, reserved);
    if (!ptrs || !offer.ptr) offer.status = SY_ERR_NO_MEMORY;
    else memset(offer.ptr, HOST_POISON, reserved);
  }

  sy_status_t st = sy__host_exchange_begin(comm, SY_HOST_OP_MEM_ALLOC, &offer);
  if (st == SY_SUCCESS) {
    sy_status_t verdict = SY_SUCCESS;
    int failed_rank = -1;
    for (int r = 0; r < world; r++) {
      const alloc_offer_t *o = sy__host_exchange_slot(comm, r);
      if (o->bytes != bytes) {
        verdict = SY_ERR_MISMATCH;
      } else if (o->status != SY_SUCCESS && verdict == SY_SUCCESS) {
        verdict = o->status;
        failed_rank = r;
      }
      if (ptrs) ptrs[r] = o->ptr;
    }
    if (verdict == SY_ERR_MISMATCH) {
      char sizes[200];
      size_t n = 0;
      sizes[0] = '\0';
      for (int r = 0; r < world && n < sizeof sizes - 24; r++) {
        const alloc_offer_t *o = sy__host_exchange_slot(comm, r);
        n += (size_t)snprintf(sizes + n, sizeof sizes - n, "%s%d:%zu", r ? " " : "", r, o->bytes);
      }
      SY_WARN("mem_alloc: ranks disagree on the size (rank:bytes %s%s); nothing allocated", sizes,
              n >= sizeof sizes - 24 && world > 1 ? " ..." : "");
    } else if (verdict != SY_SUCCESS) {
      SY_WARN(
          "mem_alloc: rank %d could not allocate %zu bytes (%s: symmetric heap of %zu bytes, %zu in use); "
          "nothing allocated",
          failed_rank, bytes, sy_status_name(verdict), hs->heap_bytes, hs->heap_used);
    }
    st = sy__host_exchange_end(comm);
    if (st == SY_SUCCESS) st = verdict;
  }
  if (st != SY_SUCCESS) {
    free(offer.ptr);
    free(ptrs);
    return st;
  }
  host_block_t *b = &hs->blocks[hs->block_count++];
  b->ptrs = ptrs;
  b->bytes = bytes;
  b->reserved = reserved;
  b->seq = hs->alloc_seq++;
  hs->heap_used += reserved;
  *ptr = offer.ptr;
  SY_TRACE("mem_alloc: %zu bytes at %p (allocation %llu)", bytes, offer.ptr, (unsigned long long)b->seq);
  return SY_SUCCESS;
}

static sy_status_t host_mem_free(sy_comm_t comm, void *ptr) {
  host_state_t *hs = comm->backend_state;
  int index = -1;
  for (int i = 0; i < hs->block_count; i++)
    if (hs->blocks[i].ptrs[hs->rank] == ptr) index = i;
  if (index < 0) {
    SY_WARN("mem_free: %p is not a symmetric allocation of this communicator", ptr);
    return SY_ERR_INVALID_ARG;
  }
  uint64_t seq = hs->blocks[index].seq;
  /* Every rank must free the same allocation; after the exchange no peer is still inside an earlier call
   * that could touch it. */
  SY_CHECK(sy__host_exchange_begin(comm, SY_HOST_OP_MEM_FREE, &seq));
  sy_status_t verdict = SY_SUCCESS;
  for (int r = 0; r < hs->world; r++) {
    uint64_t theirs = *(const uint64_t *)sy__host_exchange_slot(comm, r);
    if (theirs != seq) {
      if (verdict == SY_SUCCESS)
        SY_WARN("mem_free: rank %d frees allocation %llu while this rank frees allocation %llu; nothing freed", r,
                (unsigned long long)theirs, (unsigned long long)seq);
      verdict = SY_ERR_MISMATCH;
    }
  }
  SY_CHECK(sy__host_exchange_end(comm));
  if (verdict != SY_SUCCESS) return verdict;
  host_block_t *b = &hs->blocks[index];
  hs->heap_used -= b->reserved;
  free(b->ptrs[hs->rank]);
  free(b->ptrs);
  /* Keep allocation order: a stable order (the order of the collective calls) eases debugging. */
  memmove(b, b + 1, (size_t)(hs->block_count - index - 1) * sizeof *b);
  hs->block_count--;
  return SY_SUCCESS;
}

static sy_status_t host_peer_ptr(sy_comm_t comm, const void *ptr, int peer, void **peer_ptr) {
  void *p = translate(comm->backend_state, ptr, peer);
  if (!p) {
    SY_WARN("peer_ptr: %p is in no symmetric allocation of the host backend", ptr);
    return SY_ERR_INTERNAL; /* comm.c checked it against the same allocations */
  }
  *peer_ptr = p;
  return SY_SUCCESS;
}

static sy_status_t host_barrier(sy_comm_t comm, cudaStream_t stream) { return sy__host_sync(comm, SY_HOST_OP_BARRIER); }

static sy_status_t host_put_signal(sy_comm_t comm, void *dst, const void *src, size_t bytes, uint64_t *signal,
                                   sy_signal_op_t op, uint64_t value, int peer, cudaStream_t stream) {
  host_state_t *hs = comm->backend_state;
  uint64_t *peer_signal = translate(hs, signal, peer);
  void *peer_dst = bytes ? translate(hs, dst, peer) : NULL;
  if (!peer_signal || (bytes && !peer_dst)) {
    SY_WARN("put_signal: dst=%p or signal=%p is in no symmetric allocation of the host backend", dst, (void *)signal);
    return SY_ERR_INTERNAL;
  }
  if (bytes) memmove(peer_dst, src, bytes);
  /* Release: the data above is visible to whoever acquires the signal. */
  if (op == SY_SIGNAL_SET) __atomic_store_n(peer_signal, value, __ATOMIC_RELEASE);
  else __atomic_fetch_add(peer_signal, value, __ATOMIC_RELEASE);
  return SY_SUCCESS;
}

static sy_status_t host_signal_wait(sy_comm_t comm, uint64_t *signal, uint64_t value, cudaStream_t stream) {
  host_state_t *hs = comm->backend_state;
  uint64_t call = ++hs->wait_calls;
  uint64_t start = sy__host_now_ns();
  uint64_t limit_ns = comm->timeout_ms > UINT64_MAX / 1000000ull ? UINT64_MAX : comm->timeout_ms * 1000000ull;
  for (unsigned polls = 0;; polls++) {
    uint64_t seen = __atomic_load_n(signal, __ATOMIC_ACQUIRE);
    if (seen >= value) return SY_SUCCESS;
    if (sy__host_group_aborted(hs)) {
      /* The communicator's error is the group's (the first timeout and its line), not a bare abort. */
      char detail[sizeof comm->error_detail];
      sy__comm_set_error(comm, sy__host_group_error(hs, detail, sizeof detail), "%s", detail);
      SY_INFO("signal_wait: group aborted while waiting for %llu (saw %llu)", (unsigned long long)value,
              (unsigned long long)seen);
      return SY_ERR_ABORTED;
    }
    if (polls < 64) continue; /* a short spin: the put is usually already on its way */
    if (polls < 1024) {
      sched_yield();
    } else {
      struct timespec nap = {0, 50 * 1000};
      nanosleep(&nap, NULL);
    }
    if (sy__host_now_ns() - start >= limit_ns) {
      seen = __atomic_load_n(signal, __ATOMIC_ACQUIRE);
      if (seen >= value) return SY_SUCCESS;
      size_t offset = 0;
      host_block_t *b = block_containing(hs, signal, &offset);
      sy_status_t st = sy__host_fail_timeout(
          comm,
          "signal_wait: rank %d waited %llu ms (call %llu) for signal %p (allocation %llu, offset %zu): "
          "expected >= %llu, saw %llu",
          hs->rank, (unsigned long long)comm->timeout_ms, (unsigned long long)call, (void *)signal,
          b ? (unsigned long long)b->seq : 0ull, offset, (unsigned long long)value, (unsigned long long)seen);
      return st;
    }
  }
}

typedef struct gather_offer {
  const void *send;
  size_t bytes;
} gather_offer_t;

static sy_status_t host_allgather_host(sy_comm_t comm, const void *send, void *recv, size_t bytes) {
  host_state_t *hs = comm->backend_state;
  gather_offer_t offer = {send, bytes};
  /* The header bounds this call by the bootstrap timeout, as on the cuda backend. */
  SY_CHECK(sy__host_exchange_within(comm, SY_HOST_OP_ALLGATHER, &offer, hs->boot_timeout_ms));
  sy_status_t verdict = SY_SUCCESS;
  for (int r = 0; r < hs->world; r++) {
    const gather_offer_t *o = sy__host_exchange_slot(comm, r);
    if (o->bytes != bytes) {
      if (verdict == SY_SUCCESS)
        SY_WARN("allgather_host: rank %d contributes %zu bytes, this rank %zu; nothing copied", r, o->bytes, bytes);
      verdict = SY_ERR_MISMATCH;
    }
  }
  for (int r = 0; verdict == SY_SUCCESS && r < hs->world; r++) {
    const gather_offer_t *o = sy__host_exchange_slot(comm, r);
    verdict = (sy_status_t)sy__host_copy(comm, (char *)recv + (size_t)r * bytes, o->send, bytes);
  }
  SY_CHECK(sy__host_exchange_end(comm));
  return verdict;
}

static sy_status_t host_poll_error(sy_comm_t comm, char *detail, size_t detail_bytes) {
  return sy__host_group_error(comm->backend_state, detail, detail_bytes);
}

static sy_status_t host_destroy(sy_comm_t comm) {
  host_state_t *hs = comm->backend_state;
  if (!hs) return SY_SUCCESS;
  comm->backend_state = NULL;
  /* No wait here: this rank's memory stays in the group until the last member leaves, so a peer that is
   * still running (or was aborted mid-put) never writes into freed memory, and destroy cannot hang. */
  sy__host_group_leave(hs);
  return SY_SUCCESS;
}

static const sy_backend_ops_t host_ops = {
    .name = "host",
    .destroy = host_destroy,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .peer_ptr = host_peer_ptr,
    .barrier = host_barrier,
    .put_signal = host_put_signal,
    .signal_wait = host_signal_wait,
    .alltoallv = sy__host_alltoallv,
    .allgather_host = host_allgather_host,
    .poll_error = host_poll_error,
    .attn_create = sy__host_attn_create,
    .attn_destroy = sy__host_attn_destroy,
    .attn_plan_upload = sy__host_attn_plan_upload,
    .attn_run = sy__host_attn_run,
    .moe_create = sy__host_moe_create,
    .moe_destroy = sy__host_moe_destroy,
    .moe_dispatch_send = sy__host_moe_dispatch_send,
    .moe_dispatch_recv = sy__host_moe_dispatch_recv,
    .moe_combine_send = sy__host_moe_combine_send,
    .moe_combine_recv = sy__host_moe_combine_recv,
    .moe_check_combine = sy__host_moe_check_combine,
    .moe_ht_create = sy__host_moe_ht_create,
    .moe_ht_destroy = sy__host_moe_ht_destroy,
    .moe_ht_layout = sy__host_moe_ht_layout,
    .moe_ht_dispatch = sy__host_moe_ht_dispatch,
    .moe_ht_combine = sy__host_moe_ht_combine,
    .moe_ht_combine_backward = sy__host_moe_ht_combine_backward,
};

/* ---- init: the rendezvous ------------------------------------------------------------------------------- */

static host_state_t *state_new(const sy_resolved_config_t *config) {
  const size_t world = (size_t)config->world_size;
  host_state_t *hs = calloc(1, sizeof *hs);
  if (!hs) return NULL;
  hs->rank = config->rank;
  hs->world = config->world_size;
  hs->boot_timeout_ms = config->boot_timeout_ms;
  hs->heap_bytes = config->heap_bytes;
  if (world <= SIZE_MAX / sizeof(size_t) / world) {
    hs->a2a_send_bytes = malloc(world * world * sizeof(size_t));
    hs->a2a_send_offsets = malloc(world * world * sizeof(size_t));
  }
  hs->a2a_send = malloc(world * sizeof *hs->a2a_send);
  if (!hs->a2a_send_bytes || !hs->a2a_send_offsets || !hs->a2a_send) {
    sy__host_state_free(hs);
    return NULL;
  }
  return hs;
}

sy_status_t sy__host_comm_init(sy_comm_t comm, const sy_resolved_config_t *config) {
  host_state_t *hs = state_new(config);
  if (!hs) return SY_ERR_NO_MEMORY;
  sy_status_t st = sy__host_group_join(hs, config);
  if (st != SY_SUCCESS) {
    sy__host_state_free(hs);
    return st;
  }
  comm->ops = &host_ops;
  comm->backend_state = hs;
  comm->device = -1;
  return SY_SUCCESS;
}
