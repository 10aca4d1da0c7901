/*
 * cuda_backend.h — the cuda backend's state, shared by its .cu files: the host-mapped error slot the host
 * polls, the device-side state (call counters, abort flag), the symmetric control region (per-peer
 * counters and mailboxes), and the context every kernel gets by value.
 *
 * Control region (symmetric, one per communicator, zeroed at init). Index = the peer the entry is about:
 *   barrier[s]   at rank r: the last barrier call number rank s reached (SET by s)
 *   a2a_ready[p] at rank r: the all-to-all call number receiver p has entered (SET by p); with it
 *   a2a_mail[p]  at rank r: where receiver p wants r's bytes {offset, bytes} for that call
 *   a2a_data[s]  at rank r: chunks of the current call that arrived from s (ADDed by s, reset by r)
 * Counters only grow, except a2a_data, which the receiver resets after consuming a call; the sender of the
 * next call writes only after the receiver's next a2a_ready, so the reset cannot race (DESIGN.md).
 */
#ifndef SY_KERNELS_CUDA_BACKEND_H
#define SY_KERNELS_CUDA_BACKEND_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/internal.h"
#include "boot/boot.h"

namespace sy {

/* What a failed device wait was waiting for. */
enum op_id : int {
  OP_NONE = 0,
  OP_BARRIER = 1,
  OP_SIGNAL_WAIT = 2,
  OP_A2A_READY = 3,   /* sender waited for the receiver to enter the call */
  OP_A2A_DATA = 4,    /* receiver waited for a sender's chunks */
  OP_A2A_MISMATCH = 5 /* sender and receiver disagree on the byte count */
};
const char *op_name(int op);

/* Host-mapped (cudaHostAllocMapped): written by the device once, read by the host without synchronising. */
struct error_slot {
  int status; /* 0, or a sy_status_t; written last */
  int op, peer, rank;
  uint64_t call, expected, seen, waited_ns;
};

/* Device memory, local to this rank. */
struct dev_state {
  int abort;         /* raised by the first failed wait; every wait checks it */
  int error_claimed; /* first-error arbitration */
  uint64_t barrier_calls;
  uint64_t a2a_calls;
  unsigned a2a_blocks_done;
  unsigned pad_;
};

struct a2a_mail {
  uint64_t offset, bytes;
};

/* Symmetric control region; world_size entries each, laid out by ctrl_layout(). */
struct ctrl_layout {
  size_t barrier, a2a_ready, a2a_data, a2a_mail, a2a_mail_out, total;
};
ctrl_layout make_ctrl_layout(int world_size);

struct dev_ctx {
  error_slot *slot; /* device alias of the host-mapped slot */
  dev_state *state;
  char *ctrl;       /* symmetric control region (this rank's address; the same offset on every rank) */
  uint64_t timeout_ns;
  int rank, world_size;
  int force_put;
  ctrl_layout layout;
};

/* Host-side state of one communicator. */
struct cuda_state {
  dev_ctx ctx;
  error_slot *slot_host; /* host address of ctx.slot */
  sy_boot_t *boot;
  int num_sms;
  int a2a_blocks;   /* blocks per all-to-all launch (SY_A2A_BLOCKS, else the SM count) */
  size_t a2a_chunk; /* smallest chunk of one peer's bytes that gets its own signal (SY_A2A_CHUNK) */
  bool nvshmem_up;
};

/* Kernel launches (signal.cu, alltoall.cu). Arguments are already checked by src/core. */
sy_status_t launch_barrier(cuda_state *st, cudaStream_t stream);
sy_status_t launch_signal_wait(cuda_state *st, uint64_t *signal, uint64_t value, cudaStream_t stream);
sy_status_t launch_alltoallv(cuda_state *st, const sy_a2a_args_t *args, cudaStream_t stream);

/* Maps a CUDA error to SY_ERR_CUDA with a log line naming the call; clears a non-sticky error. */
sy_status_t cuda_error(cudaError_t err, const char *what, const char *file, int line);
#define SY_CUDA_CHECK(call)                                                  \
  do {                                                                       \
    cudaError_t sy_cuda_err_ = (call);                                       \
    if (sy_cuda_err_ != cudaSuccess) return sy::cuda_error(sy_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

}  // namespace sy

#endif
