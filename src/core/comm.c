/*
 * comm.c — the public communicator entry points: init and destroy, queries, the host allgather, the barrier and
 * the signals. Each resolves and checks its arguments once, here, and hands the backend (host/ or cuda/)
 * arguments it can trust. An asynchronous error
 * seen by a backend becomes sticky: every later call but destroy returns it.
 */
#include "boot/boot.h"
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void sy__comm_set_error(sy_comm_t comm, sy_status_t status, const char *fmt, ...) {
  if (!comm || status == SY_SUCCESS || comm->error != SY_SUCCESS) return;
  comm->error = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(comm->error_detail, sizeof comm->error_detail, fmt, ap);
  va_end(ap);
}

sy_status_t sy__comm_refuse(sy_comm_t comm, const char *func) {
  sy__log_as(SY_LOG_INFO, SY_RECORD_FIRST, __FILE__, __LINE__, "%s: refused: the communicator failed earlier: %s: %s",
             func, sy_status_name(comm->error), comm->error_detail);
  return comm->error;
}

sy_status_t sy__comm_health(sy_comm_t comm) {
  if (comm->error == SY_SUCCESS && comm->ops->poll_error) {
    char detail[sizeof comm->error_detail];
    detail[0] = '\0';
    sy_status_t st = comm->ops->poll_error(comm, detail, sizeof detail);
    if (st != SY_SUCCESS) {
      sy__comm_set_error(comm, st, "%s", detail);
      SY_WARN("communicator failed: %s: %s", sy_status_name(st), detail);
    }
  }
  return comm->error;
}

/* ---- init / destroy --------------------------------------------------------------------------------- */

/* why: where auto chose the host backend, the reason (no usable GPU), else "" */
static sy_status_t resolve_backend(sy_backend_t requested, sy_backend_t *out, char *why, size_t why_bytes) {
  sy_backend_t backend = requested;
  why[0] = '\0';
  if (backend == SY_BACKEND_AUTO) {
    const char *env = sy__env_str(SY_ENVID_SY_BACKEND);
    if (!strcasecmp(env, "cuda")) backend = SY_BACKEND_CUDA;
    else if (!strcasecmp(env, "host")) backend = SY_BACKEND_HOST;
    else if (strcasecmp(env, "auto")) {
      SY_WARN("environment variable SY_BACKEND=%s is not auto, cuda or host", env);
      return SY_ERR_INVALID_ARG;
    }
  }
  if (backend == SY_BACKEND_AUTO) {
    char reason[256];
    backend = sy__cuda_available(reason, sizeof reason) ? SY_BACKEND_CUDA : SY_BACKEND_HOST;
    if (backend == SY_BACKEND_HOST) {
      SY_INFO("backend auto: host (%s)", reason);
      snprintf(why, why_bytes, "%s", reason);
    }
  }
  *out = backend;
  return SY_SUCCESS;
}

static sy_status_t comm_init(sy_comm_t *comm_out, const sy_comm_config_t *config_in);

/* A failed init leaves the thread's log rank as it found it (init sets it early, for its own lines). */
sy_status_t sy_comm_init(sy_comm_t *comm_out, const sy_comm_config_t *config_in) {
  const int rank = sy__log_get_rank();
  const sy_status_t st = comm_init(comm_out, config_in);
  if (st != SY_SUCCESS) sy__log_set_rank(rank);
  return st;
}

static sy_status_t comm_init(sy_comm_t *comm_out, const sy_comm_config_t *config_in) {
  static const char *fn = "sy_comm_init";
  sy__last_error_clear(); /* no rank yet: sy__log_set_rank below, once known */
  SY_ARG_CHECK(comm_out != NULL, fn, "comm is NULL");
  *comm_out = NULL;
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  if (config_in) {
    SY_ARG_CHECK(config_in->size >= offsetof(sy_comm_config_t, rank), fn,
                 "config->size=%zu is too small (initialise the config with SY_COMM_CONFIG_INIT)", config_in->size);
    size_t n = config_in->size < sizeof config ? config_in->size : sizeof config;
    memcpy(&config, config_in, n);
    config.size = sizeof config;
  }
  SY_ARG_CHECK(
      config.backend == SY_BACKEND_AUTO || config.backend == SY_BACKEND_CUDA || config.backend == SY_BACKEND_HOST, fn,
      "config->backend=%d is not a sy_backend_t", (int)config.backend);
  SY_ARG_CHECK((config.rank < 0) == (config.world_size < 0), fn,
               "config->rank=%d and config->world_size=%d: set both or neither", config.rank, config.world_size);
  SY_ARG_CHECK(config.world_size < 0 || config.world_size >= 1, fn, "config->world_size=%d must be >= 1",
               config.world_size);
  SY_ARG_CHECK(config.world_size <= SY_MAX_WORLD_SIZE, fn, "config->world_size=%d exceeds SY_MAX_WORLD_SIZE=%d",
               config.world_size, SY_MAX_WORLD_SIZE);
  SY_ARG_CHECK(config.rank < 0 || config.rank < config.world_size, fn, "config->rank=%d must be < world_size=%d",
               config.rank, config.world_size);
  SY_ARG_CHECK(config.rank >= -1 && config.world_size >= -1, fn,
               "config->rank=%d / world_size=%d: use -1 for 'from the launcher'", config.rank, config.world_size);
  SY_ARG_CHECK(config.device >= -1, fn, "config->device=%d must be -1 or a device index", config.device);
  SY_ARG_CHECK(config.allgather == NULL || config.rank >= 0, fn,
               "config->allgather is set but config->rank=-1: a caller's bootstrap needs the rank and world_size it "
               "gathers over");

  if (config.rank >= 0) sy__log_set_rank(config.rank); /* the lines below are this rank's (SY_DEBUG_FILE's %r) */
  sy_resolved_config_t rc;
  memset(&rc, 0, sizeof rc);
  char auto_host[256];
  SY_CHECK(resolve_backend(config.backend, &rc.backend, auto_host, sizeof auto_host));
  long long timeout_ms = 0, boot_timeout_ms = 0;
  SY_CHECK(sy__env_int(SY_ENVID_SY_TIMEOUT_MS, &timeout_ms));
  SY_CHECK(sy__env_int(SY_ENVID_SY_BOOT_TIMEOUT_MS, &boot_timeout_ms));
  if (timeout_ms <= 0 || boot_timeout_ms <= 0) {
    SY_WARN("SY_TIMEOUT_MS=%lld and SY_BOOT_TIMEOUT_MS=%lld must be positive", timeout_ms, boot_timeout_ms);
    return SY_ERR_INVALID_ARG;
  }
  rc.timeout_ms = config.timeout_ms ? config.timeout_ms : (uint64_t)timeout_ms;
  rc.boot_timeout_ms = (uint64_t)boot_timeout_ms;
  if (config.heap_bytes) {
    rc.heap_bytes = config.heap_bytes;
  } else {
    SY_CHECK(sy__env_size(SY_ENVID_SY_HEAP_SIZE, &rc.heap_bytes));
    SY_ARG_CHECK(rc.heap_bytes > 0, fn,
                 "environment variable SY_HEAP_SIZE=%s: the symmetric heap would be empty and every sy_mem_alloc "
                 "fail (unset it for the default %s, or give a size such as 512M)",
                 sy__env_raw(SY_ENVID_SY_HEAP_SIZE), sy__env_def(SY_ENVID_SY_HEAP_SIZE)->default_value);
  }
  rc.host_group = config.host_group;
  rc.device = config.device;
  rc.allgather = config.allgather;
  rc.allgather_user = config.allgather_user;

  if (config.rank >= 0) {
    rc.rank = config.rank;
    rc.world_size = config.world_size;
    rc.local_rank = config.rank; /* an explicit rank with no launcher: assume one node */
    rc.local_size = config.world_size;
    if (rc.backend == SY_BACKEND_CUDA) {
      sy_launch_info_t info;
      if (sy__launch_info_from_env(&info) == SY_SUCCESS && info.rank >= 0 && info.world_size == config.world_size) {
        rc.local_rank = info.local_rank;
        rc.local_size = info.local_size;
        if (rc.device < 0) rc.device = info.device;
      }
    }
  } else {
    SY_ARG_CHECK(rc.backend != SY_BACKEND_HOST, fn,
                 "config->rank=-1: the host backend runs ranks as threads, so each thread must pass its rank and "
                 "world_size%s%s%s",
                 auto_host[0] ? " (the backend was auto and chose host: " : "", auto_host, auto_host[0] ? ")" : "");
    sy_launch_info_t info;
    SY_CHECK(sy__launch_info_from_env(&info));
    rc.rank = info.rank < 0 ? 0 : info.rank;
    rc.world_size = info.world_size;
    rc.local_rank = info.local_rank < 0 ? rc.rank : info.local_rank;
    rc.local_size = info.local_size < 1 ? rc.world_size : info.local_size;
    if (rc.device < 0) rc.device = info.device;
  }

  sy_comm_t comm = calloc(1, sizeof *comm);
  if (!comm) {
    SY_WARN("%s: out of memory for the communicator (%zu bytes)", fn, sizeof *comm);
    return SY_ERR_NO_MEMORY;
  }
  comm->backend = rc.backend;
  comm->rank = rc.rank;
  comm->world_size = rc.world_size;
  comm->local_rank = rc.local_rank;
  comm->timeout_ms = rc.timeout_ms;
  comm->heap_bytes = rc.heap_bytes;
  comm->device = -1;
  comm->a2a_scratch = calloc(5 * (size_t)rc.world_size, sizeof(size_t));
  if (!comm->a2a_scratch) {
    SY_WARN("%s: out of memory for the argument-check scratch of world size %d (%zu bytes)", fn, rc.world_size,
            5 * (size_t)rc.world_size * sizeof(size_t));
    free(comm);
    return SY_ERR_NO_MEMORY;
  }
  sy__log_set_rank(rc.rank);
  SY_INFO("init: backend %s, rank %d of %d, local rank %d, timeout %llu ms, heap %zu bytes",
          sy_backend_name(rc.backend), rc.rank, rc.world_size, rc.local_rank, (unsigned long long)rc.timeout_ms,
          rc.heap_bytes);
  sy_status_t st = rc.backend == SY_BACKEND_HOST ? sy__host_comm_init(comm, &rc) : sy__cuda_comm_init(comm, &rc);
  if (st != SY_SUCCESS) {
    SY_WARN("init failed: %s (%s)", sy_status_name(st), sy_status_string(st));
    free(comm->a2a_scratch);
    free(comm->symm);
    free(comm);
    return st;
  }
  *comm_out = comm;
  return SY_SUCCESS;
}

static void comm_free(sy_comm_t comm) {
  free(comm->a2a_scratch);
  free(comm->symm);
  free(comm);
}

void sy__comm_object_made(sy_comm_t comm) { comm->live_objects++; }

void sy__comm_object_gone(sy_comm_t comm) {
  if (--comm->live_objects == 0 && comm->destroyed) comm_free(comm);
}

sy_status_t sy_comm_destroy(sy_comm_t comm) {
  if (!comm) return SY_SUCCESS;
  sy__api_enter(comm->rank);
  SY_ARG_CHECK(!comm->destroyed, "sy_comm_destroy", "comm=%p was destroyed already (its objects still alive)",
               (void *)comm);
  sy_status_t st = comm->ops->destroy(comm);
  if (comm->live_objects > 0) { /* their destroys read this struct: it stays for them, and refuses everything else */
    SY_WARN(
        "sy_comm_destroy: %d attention or MoE objects made on this communicator are still alive (destroy "
        "them before it): their destroys now free only their own memory, and their other calls are refused",
        comm->live_objects);
    sy__comm_set_error(comm, SY_ERR_INVALID_ARG, "the communicator was destroyed (sy_comm_destroy) before it");
    comm->destroyed = 1;
    return st;
  }
  comm_free(comm);
  return st;
}

/* The four queries read what init fixed: they answer after an error too (the header's conventions). */
sy_status_t sy_comm_rank(sy_comm_t comm, int *rank) {
  SY_ARG_CHECK(comm && rank, "sy_comm_rank", "comm=%p rank=%p: both required", (void *)comm, (void *)rank);
  *rank = comm->rank;
  return SY_SUCCESS;
}

sy_status_t sy_comm_size(sy_comm_t comm, int *world_size) {
  SY_ARG_CHECK(comm && world_size, "sy_comm_size", "comm=%p world_size=%p: both required", (void *)comm,
               (void *)world_size);
  *world_size = comm->world_size;
  return SY_SUCCESS;
}

sy_status_t sy_comm_backend(sy_comm_t comm, sy_backend_t *backend) {
  SY_ARG_CHECK(comm && backend, "sy_comm_backend", "comm=%p backend=%p: both required", (void *)comm, (void *)backend);
  *backend = comm->backend;
  return SY_SUCCESS;
}

sy_status_t sy_comm_device(sy_comm_t comm, int *device) {
  SY_ARG_CHECK(comm && device, "sy_comm_device", "comm=%p device=%p: both required", (void *)comm, (void *)device);
  *device = comm->device;
  return SY_SUCCESS;
}

sy_status_t sy_comm_async_error(sy_comm_t comm, sy_status_t *async_status, char *detail, size_t detail_bytes) {
  static const char *fn = "sy_comm_async_error";
  SY_ARG_CHECK(comm != NULL, fn, "comm is NULL");
  SY_ARG_CHECK(async_status != NULL, fn, "async_status is NULL");
  SY_ARG_CHECK(detail == NULL || detail_bytes > 0, fn, "detail given with detail_bytes=0");
  *async_status = sy__comm_health(comm);
  if (detail) snprintf(detail, detail_bytes, "%s", comm->error ? comm->error_detail : "");
  return SY_SUCCESS;
}

sy_status_t sy_comm_allgather_host(sy_comm_t comm, const void *send, void *recv, size_t bytes) {
  static const char *fn = "sy_comm_allgather_host";
  SY_COMM_GUARD(comm, fn);
  SY_ARG_CHECK(bytes > 0, fn, "bytes=0");
  SY_ARG_CHECK(bytes <= (1u << 20), fn, "bytes=%zu: the host allgather is for small ids (at most 1 MiB)", bytes);
  SY_ARG_CHECK(send != NULL, fn, "send is NULL");
  SY_ARG_CHECK(recv != NULL, fn, "recv is NULL");
  sy_status_t st = comm->ops->allgather_host(comm, send, recv, bytes);
  if (st == SY_ERR_TIMEOUT || st == SY_ERR_BOOTSTRAP)
    sy__comm_set_error(comm, st, "host allgather of %zu bytes failed", bytes);
  return st;
}

sy_status_t sy__create_exchange(sy_comm_t comm, const void *mine, size_t bytes, sy_status_t local, void *all,
                                const char *fn) {
  const size_t W = (size_t)comm->world_size, slot = (bytes + sizeof(int32_t) + 7) / 8 * 8; /* bytes, then the verdict */
  char *buf = calloc(W + 1, slot);
  if (!buf) return SY_ERR_NO_MEMORY; /* the peers' exchange then fails or times out: a local failure */
  char *own = buf + W * slot;
  const int32_t refused = local != SY_SUCCESS;
  memcpy(own, mine, bytes);
  memcpy(own + bytes, &refused, sizeof refused);
  sy_status_t s = comm->ops->allgather_host(comm, own, buf, slot);
  if (s == SY_SUCCESS && local != SY_SUCCESS) s = local;
  for (size_t r = 0; s == SY_SUCCESS && r < W; r++) {
    int32_t theirs;
    memcpy(&theirs, buf + r * slot + bytes, sizeof theirs);
    if (theirs) {
      SY_WARN("%s: rank %zu refused its arguments (its log names them); nothing created", fn, r);
      s = SY_ERR_INVALID_ARG;
    }
  }
  for (size_t r = 0; s == SY_SUCCESS && r < W; r++) memcpy((char *)all + r * bytes, buf + r * slot, bytes);
  free(buf);
  return s;
}

sy_status_t sy__heap_verdict(sy_comm_t comm, size_t bytes, const char *fn) {
  if (bytes <= comm->heap_bytes) return SY_SUCCESS;
  SY_WARN(
      "%s: the object's symmetric memory (%zu bytes: its workspace size) exceeds the symmetric heap (%zu bytes); "
      "raise SY_HEAP_SIZE or config.heap_bytes at sy_comm_init",
      fn, bytes, comm->heap_bytes);
  return SY_ERR_NO_MEMORY;
}

/* ---- signals, barrier ----------------------------------------------------------------------------------- */

sy_status_t sy__comm_record(sy_comm_t comm, sy_status_t st, const char *fn) {
  if (st == SY_ERR_TIMEOUT || st == SY_ERR_MISMATCH || st == SY_ERR_ABORTED || st == SY_ERR_CUDA ||
      st == SY_ERR_NVSHMEM)
    sy__comm_set_error(comm, st, "%s failed: %s", fn, sy_status_name(st));
  return st;
}

sy_status_t sy_comm_barrier(sy_comm_t comm, cudaStream_t stream) {
  static const char *fn = "sy_comm_barrier";
  SY_COMM_GUARD(comm, fn);
  SY_CHECK(sy__check_stream(comm, stream, fn));
  return comm->ops->barrier(comm, stream);
}

sy_status_t sy_put_signal(sy_comm_t comm, void *dst, const void *src, size_t bytes, uint64_t *signal, sy_signal_op_t op,
                          uint64_t value, int peer, cudaStream_t stream) {
  static const char *fn = "sy_put_signal";
  SY_COMM_GUARD(comm, fn);
  SY_CHECK(sy__check_stream(comm, stream, fn));
  SY_ARG_CHECK(peer >= 0 && peer < comm->world_size, fn, "peer=%d outside [0, %d)", peer, comm->world_size);
  SY_ARG_CHECK(op == SY_SIGNAL_SET || op == SY_SIGNAL_ADD, fn, "op=%d is not SY_SIGNAL_SET or SY_SIGNAL_ADD", (int)op);
  if (bytes > 0) {
    SY_ARG_CHECK(src != NULL, fn, "src is NULL with bytes=%zu", bytes);
    SY_ARG_CHECK(sy__symm_find(comm, dst, bytes) != NULL, fn,
                 "dst=%p with bytes=%zu is not inside one symmetric allocation", dst, bytes);
  }
  SY_ARG_CHECK(signal != NULL && ((uintptr_t)signal & 7) == 0, fn, "signal=%p must be an 8-byte aligned uint64_t",
               (void *)signal);
  SY_ARG_CHECK(sy__symm_find(comm, signal, sizeof *signal) != NULL, fn,
               "signal=%p is not inside a symmetric allocation", (void *)signal);
  return comm->ops->put_signal(comm, dst, src, bytes, signal, op, value, peer, stream);
}

sy_status_t sy_signal_wait(sy_comm_t comm, uint64_t *signal, uint64_t value, cudaStream_t stream) {
  static const char *fn = "sy_signal_wait";
  SY_COMM_GUARD(comm, fn);
  SY_CHECK(sy__check_stream(comm, stream, fn));
  SY_ARG_CHECK(signal != NULL && ((uintptr_t)signal & 7) == 0, fn, "signal=%p must be an 8-byte aligned uint64_t",
               (void *)signal);
  SY_ARG_CHECK(sy__symm_find(comm, signal, sizeof *signal) != NULL, fn,
               "signal=%p is not inside a symmetric allocation", (void *)signal);
  return comm->ops->signal_wait(comm, signal, value, stream);
}
