/*
 * boot.h — how a rank learns who it is and meets the others before NVSHMEM exists: the launcher's
 * environment (syrun, torchrun, srun, mpirun) and a small out-of-band allgather (syrun's private directory
 * on one node, TCP to a rendezvous address beyond it, or the caller's own allgather). NVSHMEM's unique id and
 * NCCL's travel over it.
 */
#ifndef SY_BOOT_H
#define SY_BOOT_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sy_launch_info {
  int rank;       /* -1 when no launcher variable says */
  int world_size; /* 1 when no launcher: a singleton */
  int local_rank;
  int local_size;
  int device;         /* SY_DEVICE (syrun --gpus), else -1 */
  const char *source; /* "syrun", "torchrun", "slurm", "openmpi", "pmi", "none" */
} sy_launch_info_t;

/* Reads, in this order: SY_RANK/SY_WORLD_SIZE/SY_LOCAL_RANK/SY_LOCAL_SIZE (syrun); RANK/WORLD_SIZE/
 * LOCAL_RANK/LOCAL_WORLD_SIZE (torchrun); SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID; OMPI_COMM_WORLD_*;
 * PMI_RANK/PMI_SIZE (with MPI_LOCALRANKID). Malformed or inconsistent values (rank >= world, negative) are
 * SY_ERR_INVALID_ARG naming the variable. No launcher: rank 0 of 1. */
sy_status_t sy__launch_info_from_env(sy_launch_info_t *info);

typedef struct sy_boot sy_boot_t;

/* Opens the rendezvous for this launch: SY_BOOT_DIR (syrun) -> directory; world_size 1 -> trivial;
 * otherwise TCP to SY_BOOT_ADDR or MASTER_ADDR at SY_BOOT_PORT or MASTER_PORT + 1, with SY_BOOT_SECRET. */
sy_status_t sy__boot_open(int rank, int world_size, uint64_t timeout_ms, sy_boot_t **boot);
/* A directory shared by the ranks of one node (round k of rank r lives in DIR/ag.<k>.<r>). */
sy_status_t sy__boot_open_dir(const char *dir, int rank, int world_size, uint64_t timeout_ms, sy_boot_t **boot);
/* TCP star: rank 0 listens on addr:port (only the addresses of this host that addr names: an addr that names
 * none is SY_ERR_BOOTSTRAP saying so), the others connect to addr:port. secret (NULL or "": none) is a shared
 * secret every rank must hold: rank 0 refuses a rank that cannot prove it holds the same one (or that holds
 * one when rank 0 does not), and a rank holding one refuses a rank 0 that cannot prove it. Refused and idle
 * connections never hold up the ranks (tcp.c describes the handshake). */
sy_status_t sy__boot_open_tcp(const char *addr, int port, int rank, int world_size, uint64_t timeout_ms,
                              const char *secret, sy_boot_t **boot);
/* In-process (host backend and world 1). */
sy_status_t sy__boot_open_trivial(sy_boot_t **boot);
/* The caller's allgather (sy_comm_config_t.allgather): each round is one call of it; a non-zero return is
 * SY_ERR_BOOTSTRAP (sticky, as any failed round). Its waits are the caller's to bound. */
sy_status_t sy__boot_open_caller(sy_allgather_fn allgather, void *user, int rank, int world_size, sy_boot_t **boot);

/* Collective over the boot ranks: recv gets world_size * bytes, in rank order. Ranks passing different
 * byte counts get SY_ERR_MISMATCH. A rank that does not arrive within the timeout makes the others fail with
 * SY_ERR_TIMEOUT and a log line naming the missing ranks. */
sy_status_t sy__boot_allgather(sy_boot_t *boot, const void *send, void *recv, size_t bytes);
sy_status_t sy__boot_barrier(sy_boot_t *boot);
void sy__boot_close(sy_boot_t *boot);

#ifdef __cplusplus
}
#endif
#endif /* SY_BOOT_H */
