/*
 * comm.cu — the cuda backend's communicator: picks the GPU, meets the other ranks over the bootstrap (boot/),
 * brings NVSHMEM up from a unique id, reserves the symmetric control region and the host-mapped error slot, and
 * fills the backend table (symmetric memory, peer pointers, puts, host allgather, error polling). The operations'
 * kernels: signal.cu (barrier, signal wait), alltoall.cu, attn.cu, moe/.
 */
#include <nvshmem.h>
#include <nvshmemx.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/placement.h"
#include "cuda/backend.h"
#include "cuda/moe_ht/ht.cuh"

namespace sy {

const char *op_name(int op) {
  switch (op) {
#define SY_CUDA_OP(id, trace_name, detail) \
  case id:                                 \
    return detail;
#define SY_CUDA_PHASE(id, trace_name)
#include "cuda/op_list.h"
#undef SY_CUDA_OP
#undef SY_CUDA_PHASE
    default: return "unknown operation";
  }
}

/* The words of the error slot's peer, expected and seen fields in the detail (op_list.h: SY_CUDA_OP_LABELS). */
static void op_labels(int op, const char **who, const char **expected, const char **saw) {
  *who = "peer", *expected = "expected", *saw = "saw";
  switch (op) {
#define SY_CUDA_OP(id, trace_name, detail)
#define SY_CUDA_OP_LABELS(id, w, e, s) \
  case id:                             \
    *who = w, *expected = e, *saw = s; \
    break;
#define SY_CUDA_PHASE(id, trace_name)
#include "cuda/op_list.h"
#undef SY_CUDA_OP
#undef SY_CUDA_OP_LABELS
#undef SY_CUDA_PHASE
    default: break;
  }
}

ctrl_layout make_ctrl_layout(int world_size) {
  ctrl_layout l;
  size_t w = (size_t)world_size, off = 0;
  l.barrier = off;
  off += w * sizeof(uint64_t);
  l.a2a_data = off;
  off += w * sizeof(uint64_t);
  l.a2a_mail = off;
  off += w * sizeof(a2a_mail);
  l.abort_from = off;
  off += sizeof(uint64_t);
  l.abort_mail = off;
  off += w * sizeof(abort_mail);
  l.total = (off + 255) & ~(size_t)255;
  return l;
}

} // namespace sy

using namespace sy;

static cuda_state *state_of(sy_comm_t comm) { return (cuda_state *)comm->backend_state; }

extern "C" int sy__cuda_available(char *reason, size_t reason_bytes) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (reason) snprintf(reason, reason_bytes, "cudaGetDeviceCount: %s", cudaGetErrorString(err));
    (void)cudaGetLastError();
    return 0;
  }
  if (count == 0) {
    if (reason) snprintf(reason, reason_bytes, "no CUDA device visible");
    return 0;
  }
  if (reason && reason_bytes) reason[0] = '\0';
  return 1;
}

/* ---- backend table ------------------------------------------------------------------------------------ */

static sy_status_t cuda_poll_error(sy_comm_t comm, char *detail, size_t detail_bytes) {
  cuda_state *st = state_of(comm);
  volatile error_slot *slot = st->slot_host;
  int status = slot->status;
  if (status == 0) return SY_SUCCESS;
  __sync_synchronize();
  /* "<op>: rank r call c: peer v: expected x, saw y (bound b ms)", the fields' words by operation (a bad id's
   * "token t: k x, id y"), the bound only for a timeout */
  const char *who, *expected, *saw, *own_who, *own_expected, *own_saw;
  op_labels(slot->op, &who, &expected, &saw);
  char at[48] = "";
  if (who[0]) snprintf(at, sizeof at, "%s %d: ", who, slot->peer);
  char bound[48] = "";
  if (status == SY_ERR_TIMEOUT) snprintf(bound, sizeof bound, " (bound %.0f ms)", slot->waited_ns / 1e6);
  /* an argument's fields are signed (an expert id below -1); a wait's counters unsigned */
  char values[80];
  if (strcmp(who, "peer") != 0)
    snprintf(values, sizeof values, "%s %lld, %s %lld", expected, (long long)slot->expected, saw,
             (long long)slot->seen);
  else
    snprintf(values, sizeof values, "%s %llu, %s %llu", expected, (unsigned long long)slot->expected, saw,
             (unsigned long long)slot->seen);
  int n = snprintf(detail, detail_bytes, "%s: rank %d call %llu: %s%s%s", op_name(slot->op), slot->rank,
                   (unsigned long long)slot->call, at, values, bound);
  /* a peer's timeout told to this rank (device.cuh: adopt_timeout_at): the wait of this rank it ended, where that
   * was a wait on another rank (not a signal of its own, not the layout's barrier among its own blocks: an
   * operation whose slot names a peer rank); appended whole or not at all */
  op_labels(slot->own_op, &own_who, &own_expected, &own_saw);
  if (slot->rank != comm->rank && n >= 0 && slot->own_peer >= 0 && slot->own_peer < comm->world_size &&
      slot->own_peer != comm->rank && strcmp(own_who, "peer") == 0) {
    char more[96];
    const int m =
        snprintf(more, sizeof more, "; this rank was waiting on peer %d (%s)", slot->own_peer, op_trace(slot->own_op));
    if (m > 0 && (size_t)n + (size_t)m < detail_bytes) memcpy(detail + n, more, (size_t)m + 1);
  }
  return (sy_status_t)status;
}

/* Set when a destroy leaves NVSHMEM up (cuda_destroy): NVSHMEM cannot be brought up again in this process. */
static bool nvshmem_left_up = false;

/* collective: NVSHMEM's teardown, which waits for every rank; otherwise NVSHMEM stays until the process exits. */
static void release_state(sy_comm_t comm, cuda_state *st, bool collective) {
  aux_release(st);
  if (st->nvshmem_up && collective) {
    for (int i = comm->symm_count - 1; i >= 0; i--) nvshmem_free(comm->symm[i].ptr);
    comm->symm_count = 0;
    if (st->ctx.ctrl) nvshmem_free(st->ctx.ctrl);
    nvshmem_finalize();
    st->nvshmem_up = false;
  } else if (st->nvshmem_up) {
    comm->symm_count = 0;
    st->nvshmem_up = false;
    nvshmem_left_up = true;
  }
  trace_finish(st);
  if (st->ctx.state) cudaFree(st->ctx.state);
  if (st->slot_host) cudaFreeHost(st->slot_host);
  if (st->boot) sy__boot_close(st->boot);
  free(st);
}

static sy_status_t cuda_destroy(sy_comm_t comm) {
  cuda_state *st = state_of(comm);
  cudaError_t err = cudaDeviceSynchronize(); /* teardown may wait: nothing of ours may still run */
  if (err != cudaSuccess) SY_WARN("destroy: cudaDeviceSynchronize: %s", cudaGetErrorString(err));
  /* After a timeout a peer may be gone (killed, crashed, stuck). NVSHMEM's teardown (nvshmem_free, then
   * nvshmem_finalize) opens with a barrier of every rank that nothing bounds, so this rank releases only what is
   * its own and leaves the symmetric heap and NVSHMEM to the process's exit. */
  bool peer_may_be_gone = sy__comm_health(comm) == SY_ERR_TIMEOUT;
  if (!peer_may_be_gone && comm->world_size > 1) {
    /* a timeout this rank saw but did not record first (another error came before it), or one a peer told this rank
     * while it waited for nothing more: that peer skips the teardown too (a copy fails: assume the worst) */
    int abort = 0;
    uint64_t from = 0;
    if (cudaMemcpy(&abort, &st->ctx.state->abort, sizeof abort, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(&from, st->ctx.ctrl + st->ctx.layout.abort_from, sizeof from, cudaMemcpyDeviceToHost) != cudaSuccess)
      abort = 1;
    peer_may_be_gone = abort != 0 || from != 0;
  }
  if (peer_may_be_gone)
    SY_WARN(
        "destroy after a timeout: not waiting for the peers (one may be gone); the symmetric heap and NVSHMEM "
        "stay until this process exits");
  release_state(comm, st, !peer_may_be_gone);
  comm->backend_state = NULL;
  return err == cudaSuccess ? SY_SUCCESS : SY_ERR_CUDA;
}

static sy_status_t cuda_allgather_host(sy_comm_t comm, const void *send, void *recv, size_t bytes) {
  return sy__boot_allgather(state_of(comm)->boot, send, recv, bytes);
}

static sy_status_t cuda_mem_alloc(sy_comm_t comm, size_t bytes, void **ptr) {
  cuda_state *st = state_of(comm);
  /* nvshmem_malloc with sizes that differ between ranks is undefined: agree first, over the bootstrap. */
  uint64_t mine = bytes;
  uint64_t *all = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)comm->world_size);
  if (!all) return SY_ERR_NO_MEMORY;
  sy_status_t s = sy__boot_allgather(st->boot, &mine, all, sizeof mine);
  for (int p = 0; s == SY_SUCCESS && p < comm->world_size; p++) {
    if (all[p] != mine) {
      SY_WARN("sy_mem_alloc: rank %d asks for %llu bytes, this rank for %llu", p, (unsigned long long)all[p],
              (unsigned long long)mine);
      s = SY_ERR_MISMATCH;
    }
  }
  free(all);
  if (s != SY_SUCCESS) return s;
  void *p = nvshmem_align(256, bytes);
  /* Every rank learns whether every other got its memory, so they fail (and free) together. */
  int ok = p != NULL, oks[1024];
  int *all_ok = comm->world_size <= 1024 ? oks : (int *)malloc(sizeof(int) * (size_t)comm->world_size);
  if (!all_ok) return SY_ERR_NO_MEMORY;
  s = sy__boot_allgather(st->boot, &ok, all_ok, sizeof ok);
  int everyone = s == SY_SUCCESS;
  for (int q = 0; everyone && q < comm->world_size; q++) everyone = all_ok[q];
  if (all_ok != oks) free(all_ok);
  if (!everyone) {
    if (p) nvshmem_free(p);
    SY_WARN("sy_mem_alloc: %zu bytes: the symmetric heap is exhausted on some rank (SY_HEAP_SIZE)", bytes);
    return s == SY_SUCCESS ? SY_ERR_NO_MEMORY : s;
  }
  *ptr = p;
  return SY_SUCCESS;
}

static sy_status_t cuda_mem_free(sy_comm_t comm, void *ptr) {
  nvshmem_free(ptr);
  return SY_SUCCESS;
}

static sy_status_t cuda_peer_ptr(sy_comm_t comm, const void *ptr, int peer, void **peer_ptr) {
  cuda_state *st = state_of(comm);
  if (st->ctx.force_put && peer != comm->rank) {
    *peer_ptr = NULL;
    return SY_SUCCESS;
  }
  *peer_ptr = nvshmem_ptr(ptr, peer);
  return SY_SUCCESS;
}

static sy_status_t cuda_barrier(sy_comm_t comm, cudaStream_t stream) { return launch_barrier(state_of(comm), stream); }

static sy_status_t cuda_put_signal(sy_comm_t comm, void *dst, const void *src, size_t bytes, uint64_t *signal,
                                   sy_signal_op_t op, uint64_t value, int peer, cudaStream_t stream) {
  int nv_op = op == SY_SIGNAL_SET ? NVSHMEM_SIGNAL_SET : NVSHMEM_SIGNAL_ADD;
  nvshmemx_putmem_signal_on_stream(dst, src, bytes, signal, value, nv_op, peer, stream);
  SY_CUDA_CHECK(cudaGetLastError());
  return SY_SUCCESS;
}

static sy_status_t cuda_signal_wait(sy_comm_t comm, uint64_t *signal, uint64_t value, cudaStream_t stream) {
  return launch_signal_wait(state_of(comm), signal, value, stream);
}

static sy_status_t cuda_alltoallv(sy_comm_t comm, const sy_a2a_args_t *args, cudaStream_t stream) {
  return launch_alltoallv(state_of(comm), args, stream);
}

static const sy_backend_ops_t cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .peer_ptr = cuda_peer_ptr,
    .barrier = cuda_barrier,
    .put_signal = cuda_put_signal,
    .signal_wait = cuda_signal_wait,
    .alltoallv = cuda_alltoallv,
    .allgather_host = cuda_allgather_host,
    .poll_error = cuda_poll_error,
    .attn_create = sy__cuda_attn_create,
    .attn_destroy = sy__cuda_attn_destroy,
    .attn_plan_upload = sy__cuda_attn_plan_upload,
    .attn_run = sy__cuda_attn_run,
    .moe_create = sy__cuda_moe_create,
    .moe_destroy = sy__cuda_moe_destroy,
    .moe_dispatch_send = sy__cuda_moe_dispatch_send,
    .moe_dispatch_recv = sy__cuda_moe_dispatch_recv,
    .moe_combine_send = sy__cuda_moe_combine_send,
    .moe_combine_recv = sy__cuda_moe_combine_recv,
    .moe_check_combine = NULL, /* the combine kernel checks its arguments on the device */
    .moe_dispatch = sy__cuda_moe_dispatch,
    .moe_combine = sy__cuda_moe_combine,
    .moe_ht_create = sy__cuda_moe_ht_create,
    .moe_ht_destroy = sy__cuda_moe_ht_destroy,
    .moe_ht_layout = sy__cuda_moe_ht_layout,
    .moe_ht_dispatch = sy__cuda_moe_ht_dispatch,
    .moe_ht_combine = sy__cuda_moe_ht_combine,
    .moe_ht_combine_backward = sy__cuda_moe_ht_combine_backward,
};

/* ---- init ------------------------------------------------------------------------------------------------ */

/* Every rank's host and GPU, allgathered over the bootstrap, checked before NVSHMEM starts (core/placement.h: a job
 * where some ranks share a GPU and others do not hangs in nvshmem's init); every rank reaches the same verdict. A
 * rank that cannot name its GPU still joins the allgather, with an empty name, so that every rank fails alike. */
static sy_status_t check_placement(sy_comm_t comm, cuda_state *st) {
  const int W = comm->world_size;
  sy_place_t *all = (sy_place_t *)calloc((size_t)W + 1, sizeof *all);
  if (!all) return SY_ERR_NO_MEMORY; /* the others' allgather ends at the bootstrap's timeout */
  sy_place_t *me = &all[W];
  /* a name longer than the array: gethostname may fail but leaves a prefix; NVSHMEM hashes the whole name */
  (void)gethostname(me->host, sizeof me->host - 1);
  const cudaError_t err = cudaDeviceGetPCIBusId(me->gpu, (int)sizeof me->gpu - 1, comm->device);
  if (err != cudaSuccess) me->gpu[0] = '\0';
  char why[512] = "";
  sy_status_t s = sy__boot_allgather(st->boot, me, all, sizeof *me);
  for (int p = 0; s == SY_SUCCESS && p < W; p++)
    if (all[p].gpu[0] == '\0') {
      SY_WARN("cuda backend: rank %d could not read its GPU's PCI bus id%s%s", p, p == comm->rank ? ": " : "",
              p == comm->rank ? cudaGetErrorString(err) : "");
      s = SY_ERR_CUDA;
    }
  if (s == SY_SUCCESS) s = sy__placement_check(all, W, why, sizeof why);
  if (s == SY_ERR_UNSUPPORTED) SY_WARN("cuda backend: this placement of ranks on GPUs cannot start: %s", why);
  free(all);
  return s;
}

static sy_status_t bring_up_nvshmem(sy_comm_t comm, cuda_state *st, const sy_resolved_config_t *config) {
  /* NVLink multicast stays off on our machines (a program using it can take a shared host's GPUs down). */
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
  /* The heap holds the caller's symmetric memory, our control region, and NVSHMEM's own bookkeeping. */
  char heap[64];
  snprintf(heap, sizeof heap, "%zu", config->heap_bytes + st->ctx.layout.total + ((size_t)64 << 20));
  if (getenv("NVSHMEM_SYMMETRIC_SIZE"))
    SY_INFO("NVSHMEM_SYMMETRIC_SIZE=%s set by the caller; heap_bytes=%zu asked", getenv("NVSHMEM_SYMMETRIC_SIZE"),
            config->heap_bytes);
  else setenv("NVSHMEM_SYMMETRIC_SIZE", heap, 1);

  if (comm->world_size > 1) SY_CHECK(check_placement(comm, st));
  /* Rank 0's unique id, with whether it could make one: a rank 0 that cannot still joins the allgather, so every
   * rank fails at once with the same error instead of the others waiting out the bootstrap's timeout. */
  struct {
    int32_t ok, pad_;
    nvshmemx_uniqueid_t id;
  } mine = {1, 0, NVSHMEMX_UNIQUEID_INITIALIZER};
  if (comm->rank == 0 && nvshmemx_get_uniqueid(&mine.id) != 0) {
    SY_WARN("nvshmemx_get_uniqueid failed");
    mine.ok = 0;
  }
  void *all = malloc(sizeof mine * (size_t)comm->world_size);
  if (!all) return SY_ERR_NO_MEMORY;
  sy_status_t s = sy__boot_allgather(st->boot, &mine, all, sizeof mine);
  if (s == SY_SUCCESS) memcpy(&mine, all, sizeof mine); /* rank 0's */
  free(all);
  SY_CHECK(s);
  if (!mine.ok) {
    if (comm->rank != 0) SY_WARN("rank 0 could not make NVSHMEM's unique id; not starting");
    return SY_ERR_NVSHMEM;
  }
  nvshmemx_uniqueid_t id = mine.id;

  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  if (nvshmemx_set_attr_uniqueid_args(comm->rank, comm->world_size, &id, &attr) != 0) {
    SY_WARN("nvshmemx_set_attr_uniqueid_args(rank %d, world %d) failed", comm->rank, comm->world_size);
    return SY_ERR_NVSHMEM;
  }
  /* nvshmemx_init_attr() exits the process on failure; call what it wraps, which returns the status. */
  int provided = 0;
  nvshmemi_version_t version = {NVSHMEM_VENDOR_MAJOR_VERSION, NVSHMEM_VENDOR_MINOR_VERSION,
                                NVSHMEM_VENDOR_PATCH_VERSION};
  int rc = nvshmemi_init_thread(NVSHMEM_THREAD_SERIALIZED, &provided, NVSHMEMX_INIT_WITH_UNIQUEID, &attr, version);
  if (rc != 0) {
    SY_WARN("nvshmem init failed (status %d) at rank %d of %d", rc, comm->rank, comm->world_size);
    return SY_ERR_NVSHMEM;
  }
  st->nvshmem_up = true;
  if (nvshmem_my_pe() != comm->rank || nvshmem_n_pes() != comm->world_size) {
    SY_WARN("nvshmem sees pe %d of %d, expected rank %d of %d", nvshmem_my_pe(), nvshmem_n_pes(), comm->rank,
            comm->world_size);
    return SY_ERR_NVSHMEM;
  }
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_comm_init(sy_comm_t comm, const sy_resolved_config_t *config) {
  char reason[256];
  if (!sy__cuda_available(reason, sizeof reason)) {
    SY_WARN("cuda backend: %s", reason);
    return SY_ERR_NO_DEVICE;
  }
  int count = 0;
  SY_CUDA_CHECK(cudaGetDeviceCount(&count));
  int device = config->device >= 0 ? config->device : config->local_rank % count;
  if (device >= count) {
    SY_WARN("cuda backend: device %d requested, %d visible", device, count);
    return SY_ERR_INVALID_ARG;
  }
  SY_CUDA_CHECK(cudaSetDevice(device));
  comm->device = device;

  long long blocks = 0;
  size_t max_piece = 0;
  int force_put = 0;
  SY_CHECK(sy__env_int(SY_ENVID_SY_A2A_BLOCKS, &blocks));
  SY_CHECK(sy__env_size(SY_ENVID_SY_A2A_CHUNK, &max_piece));
  SY_CHECK(sy__env_bool(SY_ENVID_SY_FORCE_PUT, &force_put));
  int pdl = 1; /* read at each launch (exec/launch.cu: pdl_enabled); a malformed value stops init here, not later */
  SY_CHECK(sy__env_bool(SY_ENVID_SY_PDL, &pdl));
  size_t ce_min = 0;
  SY_CHECK(sy__env_size(SY_ENVID_SY_A2A_CE, &ce_min));
  if (blocks < 0 || max_piece < 16) {
    SY_WARN("SY_A2A_BLOCKS=%lld must be >= 0 and SY_A2A_CHUNK=%zu >= 16", blocks, max_piece);
    return SY_ERR_INVALID_ARG;
  }
  const char *order = sy__env_str(SY_ENVID_SY_PIECE_ORDER);
  const int piece_order = strcmp(order, "auto") == 0      ? PIECE_ORDER_AUTO
                          : strcmp(order, "static") == 0  ? PIECE_ORDER_STATIC
                          : strcmp(order, "tickets") == 0 ? PIECE_ORDER_TICKETS
                                                          : -1;
  if (piece_order < 0) {
    SY_WARN("environment variable SY_PIECE_ORDER=%s is malformed (want auto, static or tickets)", order);
    return SY_ERR_INVALID_ARG;
  }

  if (nvshmem_left_up) {
    SY_WARN(
        "cuda backend: a communicator of this process was destroyed after a timeout, leaving NVSHMEM up; it "
        "cannot start again in this process");
    return SY_ERR_UNSUPPORTED;
  }
  cuda_state *st = (cuda_state *)calloc(1, sizeof *st);
  if (!st) return SY_ERR_NO_MEMORY;
  comm->backend_state = st;
  comm->ops = &cuda_ops;
  st->ctx.rank = comm->rank;
  st->ctx.world_size = comm->world_size;
  st->ctx.timeout_ns = config->timeout_ms * 1000000ull;
  st->ctx.force_put = force_put;
  st->ctx.layout = make_ctrl_layout(comm->world_size);
  st->max_piece = max_piece;
  st->piece_order = piece_order;
  sy_status_t s = SY_SUCCESS;
  cudaError_t err;
  void *p = NULL;
  SY_CHECK_GOTO(cudaDeviceGetAttribute(&st->num_sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess
                    ? SY_SUCCESS
                    : SY_ERR_CUDA,
                s, fail);
  st->a2a_blocks = blocks > 0 ? (int)blocks : st->num_sms;
  st->a2a_ce_min = ce_min;

  if (comm->world_size == 1) s = sy__boot_open_trivial(&st->boot);
  else if (config->allgather)
    s = sy__boot_open_caller(config->allgather, config->allgather_user, comm->rank, comm->world_size, &st->boot);
  else s = sy__boot_open(comm->rank, comm->world_size, config->boot_timeout_ms, &st->boot);
  if (s != SY_SUCCESS) goto fail; /* each opening says why */
  SY_CHECK_GOTO(bring_up_nvshmem(comm, st, config), s, fail);

  err = cudaHostAlloc(&p, sizeof(error_slot), cudaHostAllocMapped);
  if (err != cudaSuccess) {
    s = cuda_error(err, "cudaHostAlloc(error slot)", __FILE__, __LINE__);
    goto fail;
  }
  st->slot_host = (error_slot *)p;
  memset(st->slot_host, 0, sizeof(error_slot));
  err = cudaHostGetDevicePointer((void **)&st->ctx.slot, p, 0);
  if (err == cudaSuccess) err = cudaMalloc((void **)&st->ctx.state, sizeof(dev_state));
  if (err == cudaSuccess) err = cudaMemset(st->ctx.state, 0, sizeof(dev_state));
  if (err != cudaSuccess) {
    s = cuda_error(err, "device state", __FILE__, __LINE__);
    goto fail;
  }
  SY_CHECK_GOTO(trace_init(st, comm->rank), s, fail);
  st->ctx.ctrl = (char *)nvshmem_align(256, st->ctx.layout.total);
  if (!st->ctx.ctrl) {
    SY_WARN("cannot reserve %zu bytes of symmetric control memory", st->ctx.layout.total);
    s = SY_ERR_NO_MEMORY;
    goto fail;
  }
  { /* what a timeout needs to be told to the peers (device.cuh: report_error_ctx_at) */
    dev_state init;
    memset(&init, 0, sizeof init);
    init.timeout_ns = st->ctx.timeout_ns;
    init.abort_from = (uint64_t *)(st->ctx.ctrl + st->ctx.layout.abort_from);
    init.abort_mails = (abort_mail *)(st->ctx.ctrl + st->ctx.layout.abort_mail);
    init.rank = comm->rank;
    init.world_size = comm->world_size;
    init.force_put = force_put;
    err = cudaMemcpy(st->ctx.state, &init, sizeof init, cudaMemcpyHostToDevice);
    if (err != cudaSuccess) {
      s = cuda_error(err, "device state", __FILE__, __LINE__);
      goto fail;
    }
  }
  for (int p = 0; p < comm->world_size && comm->world_size <= DEV_PEER_TAB; p++)
    st->ctx.peer_ctrl[p] = p == comm->rank ? st->ctx.ctrl : force_put ? NULL : (char *)nvshmem_ptr(st->ctx.ctrl, p);
  comm->peers_direct = !force_put;
  for (int p = 0; p < comm->world_size; p++)
    if (p != comm->rank && !nvshmem_ptr(st->ctx.ctrl, p)) comm->peers_direct = 0;
  err = cudaMemset(st->ctx.ctrl, 0, st->ctx.layout.total);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    s = cuda_error(err, "control region", __FILE__, __LINE__);
    goto fail;
  }
  nvshmem_barrier_all(); /* every rank's control region is zero before anyone signals into it */
  for (int q = 0; q < comm->world_size; q++)
    SY_INFO("peer %d: %s", q, nvshmem_ptr(st->ctx.ctrl, q) ? "load/store (nvlink)" : "nvshmem puts only");
  SY_INFO("cuda backend up: device %d, %d SMs, all-to-all %d blocks, pieces up to %zu bytes%s", device, st->num_sms,
          st->a2a_blocks, st->max_piece, force_put ? ", puts forced" : "");
  return SY_SUCCESS;

fail:
  release_state(comm, st, true);
  comm->backend_state = NULL;
  return s;
}
