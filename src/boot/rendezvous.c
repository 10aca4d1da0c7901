/*
 * rendezvous.c — the out-of-band allgather ranks use before NVSHMEM exists (its unique id, NCCL's, the
 * device map travel over it): the entry points, the trivial transport (world 1: a copy) and the directory
 * transport; the TCP star is in tcp.c (with tcp_accept.c, tcp_root.c, tcp_leaf.c and tcp_auth.c).
 *   dir  one node, under syrun: round k of rank r is the file DIR/ag.<k>.<r>, written under a temporary name
 *        and renamed so a reader never sees half a blob; readers poll with backoff up to 10 ms.
 *   tcp  beyond one node: rank 0 listens on its own address, the others connect; see tcp.c.
 * Every wait is bounded by the timeout given at open (per round); a rank that never arrives is named.
 */
#include "boot/rendezvous.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------------- */
/* Shared with tcp*.c (rendezvous.h)                                                                    */
/* ---------------------------------------------------------------------------------------------------- */
uint64_t sy__boot_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t sy__boot_deadline_after(uint64_t timeout_ms) {
  uint64_t now = sy__boot_now_ms();
  return timeout_ms > UINT64_MAX - now ? UINT64_MAX : now + timeout_ms;
}

int sy__boot_ms_left(uint64_t deadline) {
  uint64_t now = sy__boot_now_ms();
  if (now >= deadline) return 0;
  return deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
}

void sy__boot_sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void sy__boot_format_ranks(const unsigned char *missing, int world, char *out, size_t bytes) {
  int count = 0;
  for (int r = 0; r < world; r++) count += missing[r] != 0;
  size_t n = (size_t)snprintf(out, bytes, "%s", count == 1 ? "rank" : "ranks");
  int shown = 0;
  for (int r = 0; r < world && n < bytes; r++) {
    if (!missing[r]) continue;
    if (n + 24 > bytes) { /* 24 bytes hold the tail */
      char tail[24];
      int len = snprintf(tail, sizeof tail, " ... (%d more)", count - shown);
      if (len > 0 && (size_t)len < bytes - n) memcpy(out + n, tail, (size_t)len + 1);
      return;
    }
    n += (size_t)snprintf(out + n, bytes - n, "%s %d", shown ? "," : "", r);
    shown++;
  }
}

sy_status_t sy__boot_alloc(sy_boot_kind_t kind, int rank, int world_size, uint64_t timeout_ms, sy_boot_t **out) {
  sy_boot_t *boot = calloc(1, sizeof *boot);
  if (!boot) return SY_ERR_NO_MEMORY;
  boot->kind = kind;
  boot->rank = rank;
  boot->world_size = world_size;
  boot->timeout_ms = timeout_ms;
  *out = boot;
  return SY_SUCCESS;
}

sy_status_t sy__boot_open_trivial(sy_boot_t **boot) {
  SY_ARG_CHECK(boot != NULL, "sy__boot_open_trivial", "boot=NULL");
  return sy__boot_alloc(SY_BOOT_TRIVIAL, 0, 1, 0, boot);
}

sy_status_t sy__boot_open_caller(sy_allgather_fn allgather, void *user, int rank, int world_size, sy_boot_t **boot) {
  const char *fn = "sy__boot_open_caller";
  SY_ARG_CHECK(boot != NULL, fn, "boot=NULL");
  SY_ARG_CHECK(allgather != NULL, fn, "allgather=NULL");
  SY_ARG_CHECK(world_size >= 1, fn, "world_size=%d must be >= 1", world_size);
  SY_ARG_CHECK(rank >= 0 && rank < world_size, fn, "rank=%d must be in [0, %d)", rank, world_size);
  SY_CHECK(sy__boot_alloc(SY_BOOT_CALLER, rank, world_size, 0, boot));
  (*boot)->allgather = allgather;
  (*boot)->allgather_user = user;
  SY_INFO("rendezvous: the caller's allgather, rank %d of %d", rank, world_size);
  return SY_SUCCESS;
}

static sy_status_t caller_allgather(sy_boot_t *boot, const void *send, void *recv, size_t bytes) {
  const int rc = boot->allgather(boot->allgather_user, send, recv, bytes);
  if (rc != 0) {
    SY_WARN(
        "rendezvous: the caller's allgather (sy_comm_config_t.allgather) returned %d in round %llu (%zu bytes a "
        "rank)",
        rc, (unsigned long long)boot->round, bytes);
    return SY_ERR_BOOTSTRAP;
  }
  boot->round++;
  return SY_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Directory mode                                                                                         */
/* ---------------------------------------------------------------------------------------------------- */
#define DIR_MAGIC 0x53594147u /* "SYAG" */

typedef struct dir_header {
  uint32_t magic;
  int32_t rank;
  uint64_t round;
  uint64_t bytes;
} dir_header_t;

/* Parses "ag.<k>.<r>" exactly. */
static int parse_round_file(const char *name, unsigned long long *round, int *rank) {
  int used = 0;
  if (sscanf(name, "ag.%llu.%d%n", round, rank, &used) != 2) return 0;
  return name[used] == '\0';
}

sy_status_t sy__boot_open_dir(const char *dir, int rank, int world_size, uint64_t timeout_ms, sy_boot_t **boot) {
  const char *fn = "sy__boot_open_dir";
  SY_ARG_CHECK(boot != NULL, fn, "boot=NULL");
  SY_ARG_CHECK(dir != NULL && *dir, fn, "dir=%s", dir ? "\"\"" : "NULL");
  SY_ARG_CHECK(world_size >= 1, fn, "world_size=%d must be >= 1", world_size);
  SY_ARG_CHECK(rank >= 0 && rank < world_size, fn, "rank=%d must be in [0, %d)", rank, world_size);
  SY_ARG_CHECK(timeout_ms > 0, fn, "timeout_ms=0 must be positive");
  struct stat st;
  if (stat(dir, &st) != 0) {
    char eb[128];
    SY_WARN("rendezvous: directory %s: %s", dir, sy__boot_err_text(errno, eb, sizeof eb));
    return SY_ERR_BOOTSTRAP;
  }
  if (!S_ISDIR(st.st_mode)) {
    SY_WARN("rendezvous: %s is not a directory", dir);
    return SY_ERR_BOOTSTRAP;
  }
  /* A boot opened earlier in this job (an earlier communicator) left this rank's last file behind: it may
   * not be deleted before every rank has read it. Continue the numbering after it, so a new round never
   * meets an old file under its name; the first round completed here proves the old one is read. */
  unsigned long long next_round = 0;
  DIR *d = opendir(dir);
  if (!d) {
    char eb[128];
    SY_WARN("rendezvous: cannot list %s: %s", dir, sy__boot_err_text(errno, eb, sizeof eb));
    return SY_ERR_BOOTSTRAP;
  }
  struct dirent *entry;
  while ((entry = readdir(d)) != NULL) {
    unsigned long long round;
    int file_rank;
    if (parse_round_file(entry->d_name, &round, &file_rank) && file_rank == rank && round + 1 > next_round)
      next_round = round + 1;
  }
  closedir(d);
  sy_status_t status = sy__boot_alloc(SY_BOOT_DIR, rank, world_size, timeout_ms, boot);
  if (status != SY_SUCCESS) return status;
  (*boot)->dir = strdup(dir);
  if (!(*boot)->dir) {
    free(*boot);
    *boot = NULL;
    return SY_ERR_NO_MEMORY;
  }
  (*boot)->round = next_round;
  SY_INFO("rendezvous: rank %d of %d uses directory %s from round %llu", rank, world_size, dir, next_round);
  return SY_SUCCESS;
}

static sy_status_t write_all_fd(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return SY_ERR_SYSTEM;
    p += n;
    len -= (size_t)n;
  }
  return SY_SUCCESS;
}

static sy_status_t read_all_fd(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return SY_ERR_SYSTEM;
    p += n;
    len -= (size_t)n;
  }
  return SY_SUCCESS;
}

static sy_status_t dir_publish(sy_boot_t *boot, uint64_t round, const void *send, size_t bytes) {
  size_t path_len = strlen(boot->dir) + 64;
  char *tmp = malloc(path_len), *final = malloc(path_len);
  sy_status_t status = SY_ERR_NO_MEMORY;
  if (!tmp || !final) goto done;
  snprintf(tmp, path_len, "%s/.ag.%llu.%d.tmp", boot->dir, (unsigned long long)round, boot->rank);
  snprintf(final, path_len, "%s/ag.%llu.%d", boot->dir, (unsigned long long)round, boot->rank);
  dir_header_t header = {DIR_MAGIC, boot->rank, round, bytes};
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  status = SY_ERR_BOOTSTRAP;
  if (fd < 0) goto fail;
  sy_status_t written = write_all_fd(fd, &header, sizeof header);
  if (written == SY_SUCCESS && bytes) written = write_all_fd(fd, send, bytes);
  if (close(fd) != 0 || written != SY_SUCCESS) goto fail;
  if (rename(tmp, final) != 0) goto fail;
  status = SY_SUCCESS;
  goto done;
fail : {
  char eb[128];
  SY_WARN("rendezvous: round %llu: cannot write %s: %s", (unsigned long long)round, final,
          sy__boot_err_text(errno, eb, sizeof eb));
  unlink(tmp);
}
done:
  free(tmp);
  free(final);
  return status;
}

/* Reads rank r's file of this round if it is there. Returns 1 when read, 0 when not there yet, or a status. */
static int dir_fetch(sy_boot_t *boot, uint64_t round, int r, void *dst, size_t bytes, char *path, size_t path_len,
                     sy_status_t *status) {
  snprintf(path, path_len, "%s/ag.%llu.%d", boot->dir, (unsigned long long)round, r);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    char eb[128];
    SY_WARN("rendezvous: round %llu: cannot open %s: %s", (unsigned long long)round, path,
            sy__boot_err_text(errno, eb, sizeof eb));
    *status = SY_ERR_BOOTSTRAP;
    return -1;
  }
  dir_header_t header;
  struct stat st;
  int ok = fstat(fd, &st) == 0 && read_all_fd(fd, &header, sizeof header) == SY_SUCCESS && header.magic == DIR_MAGIC &&
           header.rank == r && header.round == round && (uint64_t)st.st_size == sizeof header + header.bytes;
  if (!ok) {
    close(fd);
    SY_WARN("rendezvous: round %llu: %s is not a rendezvous file of rank %d", (unsigned long long)round, path, r);
    *status = SY_ERR_BOOTSTRAP;
    return -1;
  }
  if (header.bytes != bytes) {
    close(fd);
    SY_WARN("rendezvous: round %llu: rank %d passed %llu bytes, rank %d passed %zu", (unsigned long long)round, r,
            (unsigned long long)header.bytes, boot->rank, bytes);
    *status = SY_ERR_MISMATCH;
    return -1;
  }
  sy_status_t got = bytes ? read_all_fd(fd, dst, bytes) : SY_SUCCESS;
  close(fd);
  if (got != SY_SUCCESS) {
    SY_WARN("rendezvous: round %llu: short read of %s", (unsigned long long)round, path);
    *status = SY_ERR_BOOTSTRAP;
    return -1;
  }
  return 1;
}

static sy_status_t dir_allgather(sy_boot_t *boot, const void *send, void *recv, size_t bytes) {
  const uint64_t round = boot->round;
  const int world = boot->world_size;
  const uint64_t deadline = sy__boot_deadline_after(boot->timeout_ms);
  SY_CHECK(dir_publish(boot, round, send, bytes));
  unsigned char *missing = malloc((size_t)world);
  size_t path_len = strlen(boot->dir) + 64;
  char *path = malloc(path_len);
  sy_status_t status = SY_SUCCESS;
  if (!missing || !path) {
    status = SY_ERR_NO_MEMORY;
    goto done;
  }
  memset(missing, 1, (size_t)world);
  int remaining = world;
  long backoff_us = 50;
  for (;;) {
    for (int r = 0; r < world; r++) {
      if (!missing[r]) continue;
      /* recv may be NULL when bytes is 0, and NULL + 0 is undefined in C. */
      char *slot = bytes ? (char *)recv + (size_t)r * bytes : (char *)recv;
      int got = dir_fetch(boot, round, r, slot, bytes, path, path_len, &status);
      if (got < 0) goto done;
      if (got) {
        missing[r] = 0;
        remaining--;
      }
    }
    if (remaining == 0) break;
    uint64_t now = sy__boot_now_ms();
    if (now >= deadline) {
      char ranks[256];
      sy__boot_format_ranks(missing, world, ranks, sizeof ranks);
      SY_WARN("rendezvous: round %llu: %s never arrived within %llu ms (dir %s)", (unsigned long long)round, ranks,
              (unsigned long long)boot->timeout_ms, boot->dir);
      status = SY_ERR_TIMEOUT;
      goto done;
    }
    long left_us = deadline - now >= 10 ? 10000 : (long)(deadline - now) * 1000;
    sy__boot_sleep_us(backoff_us < left_us ? backoff_us : left_us);
    backoff_us = backoff_us * 2 > 10000 ? 10000 : backoff_us * 2;
  }
  /* Every rank wrote round k, so every rank finished reading round k - 1: this rank's file of it can go. */
  if (round > 0) {
    snprintf(path, path_len, "%s/ag.%llu.%d", boot->dir, (unsigned long long)(round - 1), boot->rank);
    unlink(path);
  }
  boot->round++;
done:
  free(missing);
  free(path);
  return status;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Entry points                                                                                           */
/* ---------------------------------------------------------------------------------------------------- */
sy_status_t sy__boot_open(int rank, int world_size, uint64_t timeout_ms, sy_boot_t **boot) {
  const char *fn = "sy__boot_open";
  SY_ARG_CHECK(boot != NULL, fn, "boot=NULL");
  SY_ARG_CHECK(world_size >= 1, fn, "world_size=%d must be >= 1", world_size);
  SY_ARG_CHECK(rank >= 0 && rank < world_size, fn, "rank=%d must be in [0, %d)", rank, world_size);
  SY_ARG_CHECK(timeout_ms > 0, fn, "timeout_ms=0 must be positive");
  const char *dir = sy__env_raw(SY_ENVID_SY_BOOT_DIR);
  if (dir) return sy__boot_open_dir(dir, rank, world_size, timeout_ms, boot);
  if (world_size == 1) return sy__boot_open_trivial(boot);

  const char *addr = sy__env_raw(SY_ENVID_SY_BOOT_ADDR);
  const char *addr_name = "SY_BOOT_ADDR";
  if (!addr) {
    addr = getenv("MASTER_ADDR");
    addr_name = "MASTER_ADDR";
    if (addr && !*addr) addr = NULL;
  }
  if (!addr) {
    SY_WARN(
        "rendezvous: rank %d of %d has no way to meet the others: run under syrun on one node, or set "
        "MASTER_ADDR and MASTER_PORT (torchrun sets them) or SY_BOOT_ADDR and SY_BOOT_PORT",
        rank, world_size);
    return SY_ERR_BOOTSTRAP;
  }
  long long port = 0;
  SY_CHECK(sy__env_int(SY_ENVID_SY_BOOT_PORT, &port));
  const char *port_name = "SY_BOOT_PORT";
  if (port == 0) {
    const char *master_port = getenv("MASTER_PORT");
    long long base;
    if (!master_port || !*master_port) {
      SY_WARN("rendezvous: %s=%s is set but neither SY_BOOT_PORT nor MASTER_PORT is", addr_name, addr);
      return SY_ERR_BOOTSTRAP;
    }
    if (sy__parse_int(master_port, &base) != SY_SUCCESS) {
      SY_WARN("rendezvous: MASTER_PORT=%s is not a port number", master_port);
      return SY_ERR_INVALID_ARG;
    }
    port = base + 1; /* MASTER_PORT itself is torch's store */
    port_name = "MASTER_PORT + 1";
  }
  if (port < 1 || port > 65535) {
    SY_WARN("rendezvous: port %lld (%s) is outside 1..65535", port, port_name);
    return SY_ERR_INVALID_ARG;
  }
  /* The secret stays out of every log line, this one included. */
  const char *secret = sy__env_raw(SY_ENVID_SY_BOOT_SECRET);
  SY_INFO("rendezvous: tcp to %s=%s port %lld (%s)%s", addr_name, addr, port, port_name,
          secret ? ", with SY_BOOT_SECRET" : "");
  return sy__boot_open_tcp(addr, (int)port, rank, world_size, timeout_ms, secret, boot);
}

sy_status_t sy__boot_allgather(sy_boot_t *boot, const void *send, void *recv, size_t bytes) {
  const char *fn = "sy__boot_allgather";
  SY_ARG_CHECK(boot != NULL, fn, "boot=NULL");
  SY_ARG_CHECK(send != NULL || bytes == 0, fn, "send=NULL with bytes=%zu", bytes);
  SY_ARG_CHECK(recv != NULL || bytes == 0, fn, "recv=NULL with bytes=%zu", bytes);
  SY_ARG_CHECK(bytes <= SIZE_MAX / (size_t)boot->world_size, fn, "bytes=%zu times world_size=%d overflows", bytes,
               boot->world_size);
  if (boot->failed != SY_SUCCESS) {
    SY_WARN("rendezvous: an earlier round failed (%s); this rendezvous cannot be used again",
            sy_status_name(boot->failed));
    return boot->failed;
  }
  sy_status_t status = SY_SUCCESS;
  switch (boot->kind) {
    case SY_BOOT_TRIVIAL:
      if (bytes) memmove(recv, send, bytes);
      break;
    case SY_BOOT_DIR: status = dir_allgather(boot, send, recv, bytes); break;
    case SY_BOOT_TCP:
      if (boot->world_size == 1) {
        if (bytes) memmove(recv, send, bytes);
      } else {
        status = sy__boot_tcp_round(boot, send, recv, bytes);
      }
      if (status == SY_SUCCESS) boot->round++;
      break;
    case SY_BOOT_CALLER: status = caller_allgather(boot, send, recv, bytes); break;
  }
  if (status != SY_SUCCESS) boot->failed = status;
  return status;
}

sy_status_t sy__boot_barrier(sy_boot_t *boot) {
  SY_ARG_CHECK(boot != NULL, "sy__boot_barrier", "boot=NULL");
  unsigned char *all = malloc((size_t)boot->world_size);
  if (!all) return SY_ERR_NO_MEMORY;
  unsigned char mine = 1;
  sy_status_t status = sy__boot_allgather(boot, &mine, all, 1);
  free(all);
  return status;
}

void sy__boot_close(sy_boot_t *boot) {
  if (!boot) return;
  if (boot->fds) {
    int count = boot->rank == 0 ? boot->world_size : 1;
    for (int i = 0; i < count; i++)
      if (boot->fds[i] >= 0) close(boot->fds[i]);
    free(boot->fds);
  }
  free(boot->dir);
  free(boot->addr);
  sy__boot_forget_secret(boot);
  free(boot);
}
