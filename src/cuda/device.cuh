/*
 * device.cuh — device-side pieces every kernel of the cuda backend shares: the bounded wait (poll a
 * counter, check %globaltimer every few thousand polls, give up on timeout or on the abort flag, and tell the peers
 * of a timeout), the error
 * report into the host-mapped slot the host polls, acquire/release accesses at system scope, and the
 * block-wide copy used for direct NVLink stores.
 */
#ifndef SY_CUDA_DEVICE_CUH
#define SY_CUDA_DEVICE_CUH

#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdint.h>

#include "cuda/backend.h"

namespace sy {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t ld_relaxed_gpu(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void red_add_release_sys(uint64_t *p, uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* The same at GPU scope: for a word on this GPU that only this GPU's threads wait for (MEMBAR.GPU rather than
 * MEMBAR.SYS, which waits for the whole system: bench/NOTES.md, "completion: fences and signals"). */
__device__ __forceinline__ void red_add_release_gpu(uint64_t *p, uint64_t v) {
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* A peer's word at system scope, this GPU's own at GPU scope. */
__device__ __forceinline__ void red_add_release(uint64_t *p, uint64_t v, bool sys) {
  if (sys) red_add_release_sys(p, v);
  else red_add_release_gpu(p, v);
}

/* A release fence, then relaxed operations: one fence for several words (the release pattern of the PTX
 * memory model: fence.acq_rel followed by a strong write). */
__device__ __forceinline__ void fence_acq_rel(bool sys) {
  if (sys) asm volatile("fence.acq_rel.sys;" ::: "memory");
  else asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

__device__ __forceinline__ void st_relaxed_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void red_add_relaxed_sys(uint64_t *p, uint64_t v) {
  asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Records the first error of this communicator: arbitration in device memory (atomics on host-mapped memory
 * are not native over PCIe), then the fields and last the status into the host-mapped slot. Returns whether this
 * call's error was the first. A timeout also raises abort, so every other wait gives up; a disagreement between
 * two ranks (a mismatch) does not: the call still serves every other peer, which would otherwise time out. The
 * body is out of line, as every cold path on a kernel's way should be: a never-taken branch over inlined code
 * costs the taken jump around it an instruction fetch (bench/NOTES.md, "instruction fetch"). It takes the
 * context's fields, not the context: the address of a kernel parameter would cost a local copy at the kernel's
 * start. */
static __device__ __noinline__ bool report_error_at(dev_state *state, error_slot *eslot, int rank, uint64_t timeout_ns,
                                                    int status, int op, int peer, uint64_t call, uint64_t expected,
                                                    uint64_t seen, int own_op = 0, int own_peer = -1) {
  const bool first = atomicCAS(&state->error_claimed, 0, 1) == 0;
  if (first) {
    volatile error_slot *slot = eslot;
    slot->own_op = own_op;
    slot->own_peer = own_peer;
    slot->op = op;
    slot->peer = peer;
    slot->rank = rank;
    slot->call = call;
    slot->expected = expected;
    slot->seen = seen;
    slot->waited_ns = timeout_ns;
    __threadfence_system();
    slot->status = status;
    __threadfence_system();
  }
  if (status == SY_ERR_TIMEOUT) atomicExch(&state->abort, 1);
  return first;
}

/* report_error_at, and where the error is the first timeout this rank records, that timeout told to every peer
 * (their control regions' abort_mail[rank], then abort_from): each peer's next abort check (aborted()) records it
 * as its own error and gives up, as the host backend's group abort does. Without it a peer waits out its own
 * bound, and a peer whose wait is on a rank that stopped on the timeout (not on the rank that failed) names that
 * rank instead. The record is self-validating (each word's low 32 bits carry 1 + this rank, as the mail of the
 * all-to-all carries the call), so neither side needs an order between the record and the flag: where the peer is
 * reachable by load/store, volatile stores and a compare-and-swap that keeps the first flag; otherwise puts of
 * values and a signal. No fence or quiet: over a remote transport those wait for every outstanding put, a dead
 * peer's included. Told once (state->told; a told rank does not pass it on). What it needs besides the error is in
 * dev_state (set at init). */
static __device__ __noinline__ void report_error_ctx_at(dev_state *state, error_slot *eslot, int status, int op,
                                                        int peer, uint64_t call, uint64_t expected, uint64_t seen) {
  const int rank = state->rank;
  report_error_at(state, eslot, rank, state->timeout_ns, status, op, peer, call, expected, seen);
  if (status != SY_ERR_TIMEOUT || atomicCAS(&state->told, 0, 1) != 0) return;
  const uint64_t v[5] = {call, expected, seen, state->timeout_ns, ((uint64_t)(uint32_t)op << 32) | (uint32_t)peer};
  const uint64_t tag = (uint32_t)(rank + 1);
  uint64_t w[2 * 5];
  for (int i = 0; i < 5; i++) {
    w[2 * i] = (v[i] << 32) | tag;
    w[2 * i + 1] = (v[i] & 0xFFFFFFFF00000000ull) | tag;
  }
  abort_mail *mail = state->abort_mails + rank; /* our record, at each peer */
  uint64_t *from = state->abort_from;
  for (int p = 0; p < state->world_size; p++) {
    if (p == rank) continue;
    abort_mail *m = state->force_put ? nullptr : (abort_mail *)nvshmem_ptr(mail, p);
    uint64_t *f = state->force_put ? nullptr : (uint64_t *)nvshmem_ptr(from, p);
    if (m && f) {
      volatile uint64_t *d = m->word;
      for (int k = 0; k < 2 * 5; k++) d[k] = w[k];
      __threadfence_system(); /* this thread's stores only: waits for no peer */
      atomicCAS_system((unsigned long long *)f, 0ull, (unsigned long long)rank + 1);
    } else {
      for (int k = 0; k < 2 * 5; k++) nvshmem_uint64_p(mail->word + k, w[k], p);
      nvshmemx_signal_op(from, (uint64_t)rank + 1, NVSHMEM_SIGNAL_SET, p);
    }
  }
}

__device__ __forceinline__ void report_error(const dev_ctx &ctx, int status, int op, int peer, uint64_t call,
                                             uint64_t expected, uint64_t seen) {
  report_error_ctx_at(ctx.state, ctx.slot, status, op, peer, call, expected, seen);
}

/* A peer's timeout arrived (abort_from = 1 + its rank): once its record is whole, recorded as this rank's error —
 * the peer's fields as they came (the same detail as on that rank, as the host backend's ranks adopt the group's
 * first timeout) and the wait it ended here (own_op, own_peer: what this rank was waiting for, which names the
 * failed rank where the peer's wait named this one) — and the abort raised. Returns false while the record is not
 * whole yet (the wait polls on and checks again). Out of line: cold. */
static __device__ __noinline__ bool adopt_timeout_at(dev_state *state, error_slot *eslot, uint64_t from, int own_op,
                                                     int own_peer) {
  if (from > (uint64_t)state->world_size) return false; /* not a rank: never written so */
  const volatile uint64_t *m = state->abort_mails[from - 1].word;
  uint64_t v[5];
  for (int i = 0; i < 5; i++) {
    const uint64_t lo = m[2 * i], hi = m[2 * i + 1];
    if ((uint32_t)lo != (uint32_t)from || (uint32_t)hi != (uint32_t)from) return false;
    v[i] = (lo >> 32) | (hi & 0xFFFFFFFF00000000ull);
  }
  atomicExch(&state->told, 1); /* a told rank does not pass it on */
  report_error_at(state, eslot, (int)(from - 1), v[3], SY_ERR_TIMEOUT, (int)(v[4] >> 32), (int)(int32_t)(uint32_t)v[4],
                  v[0], v[1], v[2], own_op, own_peer);
  return true;
}

/* Thread 0 of a block marks a phase boundary; costs one branch when tracing is off (the body out of line). */
static __device__ __noinline__ void trace_at(dev_state *state, trace_event *trace, uint32_t cap, int op, int phase,
                                             bool begin, int peer, uint64_t call) {
  const unsigned i = atomicAdd(&state->trace_next, 1u);
  if (i >= cap) return;
  trace_event *e = trace + i;
  e->t_ns = global_timer_ns();
  e->call = (uint32_t)call;
  e->op = (uint16_t)op;
  e->phase = (uint16_t)phase;
  e->block = (uint16_t)blockIdx.x;
  e->peer = (int16_t)peer;
  e->begin = begin;
}

/* ON = false (the kernels' instances without tracing, used unless SY_TRACE_FILE is set) compiles the point out: even
 * out of line, a call's argument setup is instructions that every trace point's branch jumps over. */
template <bool ON = true>
__device__ __forceinline__ void trace(const dev_ctx &ctx, int op, int phase, bool begin, int peer, uint64_t call) {
  if (ON && ctx.trace) trace_at(ctx.state, ctx.trace, ctx.trace_cap, op, phase, begin, peer, call);
}

/* Atomic add with acquire-release semantics at GPU scope, returning the old value: the "last block" count
 * (a block's earlier stores are ordered before it, and the block that sees the last count sees them). */
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned *p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

__device__ __forceinline__ uint64_t atom_add_acq_rel_gpu(uint64_t *p, uint64_t v) {
  uint64_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}

/* Another wait of this communicator failed, or a peer's wait timed out and told this rank (adopted here, with the
 * wait that asks: op and peer, or 0 and -1 outside a wait on one peer). */
__device__ __forceinline__ bool aborted(const dev_ctx &ctx, int op = 0, int peer = -1) {
  if (*(volatile int *)&ctx.state->abort != 0) return true;
  const uint64_t from = *(volatile uint64_t *)(ctx.ctrl + ctx.layout.abort_from);
  return from != 0 && adopt_timeout_at(ctx.state, ctx.slot, from, op, peer);
}

/* Waits until *counter >= expected (acquire, system scope). Returns true on success; false on timeout (error
 * reported) or when another wait of this communicator already failed (abort). One thread calls it. */
__device__ inline bool wait_geq(const dev_ctx &ctx, const uint64_t *counter, uint64_t expected, int op, int peer,
                                uint64_t call) {
  uint64_t seen = ld_acquire_sys(counter);
  if (seen >= expected) return true;
  const uint64_t start = global_timer_ns();
  for (uint32_t polls = 1;; polls++) {
    seen = ld_acquire_sys(counter);
    if (seen >= expected) return true;
    if ((polls & 1023u) == 0) {
      if (aborted(ctx, op, peer)) return false;
      if (global_timer_ns() - start > ctx.timeout_ns) {
        report_error(ctx, SY_ERR_TIMEOUT, op, peer, call, expected, seen);
        return false;
      }
    }
  }
}

/* The same, returning the value it saw: >= expected on success, below it otherwise (for a caller that reads
 * more from the counter than "arrived": the attention kernel's mismatch flag). A function of its own, so that
 * the other kernels' waits keep their code. */
__device__ inline uint64_t wait_geq_seen(const dev_ctx &ctx, const uint64_t *counter, uint64_t expected, int op,
                                         int peer, uint64_t call) {
  uint64_t seen = ld_acquire_sys(counter);
  if (seen >= expected) return seen;
  const uint64_t start = global_timer_ns();
  for (uint32_t polls = 1;; polls++) {
    seen = ld_acquire_sys(counter);
    if (seen >= expected) return seen;
    if ((polls & 1023u) == 0) {
      if (aborted(ctx, op, peer)) return seen;
      if (global_timer_ns() - start > ctx.timeout_ns) {
        report_error(ctx, SY_ERR_TIMEOUT, op, peer, call, expected, seen);
        return seen;
      }
    }
  }
}

/* Mail: "receiver `me` entered call n; here are V 64-bit values" (the all-to-all: where the sender's bytes go
 * and how many; attention dispatch: where each channel's rows go and the call's fingerprint), posted by the
 * receiver into slot `me` of the mail at sender p as 2 V self-validating 8-byte words — 32 bits of payload and
 * the low 32 bits of n in each — with plain stores and no fence. The sender knows the mail is whole when all
 * its words carry n. */
/* NVSHMEM's calls, out of line: cold on a kernel's path wherever every peer is load/store reachable, and a
 * never-taken branch over inlined code costs the jump around it an instruction fetch (bench/NOTES.md,
 * "Instruction fetch"). The _block ones are called by every thread of a block, the _warp one by a whole warp. */
static __device__ __noinline__ char *nvshmem_ptr_cold(const void *a, int p) { return (char *)nvshmem_ptr(a, p); }

static __device__ __noinline__ void put_nbi_block_cold(void *dst, const void *src, size_t bytes, int p) {
  nvshmemx_putmem_nbi_block(dst, src, bytes, p);
}

static __device__ __noinline__ void put_nbi_warp_cold(void *dst, const void *src, size_t bytes, int p) {
  nvshmemx_putmem_nbi_warp(dst, src, bytes, p);
}

static __device__ __noinline__ void put_signal_nbi_block_cold(void *dst, const void *src, size_t bytes, uint64_t *sig,
                                                              uint64_t add, int p) {
  nvshmemx_putmem_signal_nbi_block(dst, src, bytes, sig, add, NVSHMEM_SIGNAL_ADD, p);
}

/* Adds `add` to p's signal word `sig`; with `quiet`, after this thread's earlier puts completed. */
static __device__ __noinline__ void signal_add_cold(uint64_t *sig, uint64_t add, int p, bool quiet) {
  if (quiet) nvshmem_quiet();
  nvshmemx_signal_op(sig, add, NVSHMEM_SIGNAL_ADD, p);
}

static __device__ __noinline__ void p_u64_cold(uint64_t *dst, uint64_t v, int p) { nvshmem_uint64_p(dst, v, p); }

static __device__ __noinline__ void p_int_cold(int *dst, int v, int p) { nvshmem_int_p(dst, v, p); }

/* Peer p's copy of `a` (an address in this rank's control region) where p is load/store reachable, else NULL
 * (puts; always NULL with SY_FORCE_PUT, except to this rank itself). */
__device__ __forceinline__ char *peer_ctrl(const dev_ctx &ctx, const void *a, int p) {
  if (ctx.world_size <= DEV_PEER_TAB) {
    char *base = ctx.peer_ctrl[p]; /* a kernel parameter: no dependent loads */
    return base ? base + ((const char *)a - ctx.ctrl) : nullptr;
  }
  if (ctx.force_put && p != ctx.rank) return nullptr;
  return nvshmem_ptr_cold(a, p);
}

/* Receiver: posts V values to sender p. slot: our mail slot's 2 V words (this rank's address of the slot that
 * p reads as ours). */
template <int V>
__device__ inline void post_mail_words(const dev_ctx &ctx, uint64_t *slot, int p, uint64_t call,
                                       const uint64_t (&v)[V]) {
  const uint64_t c = (uint32_t)call;
  uint64_t w[2 * V];
#pragma unroll
  for (int i = 0; i < V; i++) {
    w[2 * i] = (v[i] << 32) | c;
    w[2 * i + 1] = (v[i] & 0xFFFFFFFF00000000ull) | c;
  }
  uint64_t *remote = (uint64_t *)peer_ctrl(ctx, slot, p);
  if (remote) {
    volatile uint64_t *r = remote;
#pragma unroll
    for (int k = 0; k < 2 * V; k++) r[k] = w[k];
  } else {
    for (int k = 0; k < 2 * V; k++) p_u64_cold(slot + k, w[k], p);
  }
}

/* Sender: waits (bounded) until receiver p's mail for `call` (its 2 V words here) is whole, then returns its V
 * values. */
template <int V>
__device__ inline bool wait_mail_words(const dev_ctx &ctx, const uint64_t *words, int p, uint64_t call, int op,
                                       uint64_t (&v)[V]) {
  const volatile uint64_t *m = words;
  const uint32_t c = (uint32_t)call;
  uint64_t w[2 * V];
  uint64_t start = 0;
  for (uint32_t polls = 0;; polls++) {
    int whole = 1;
#pragma unroll
    for (int k = 0; k < 2 * V; k++) {
      w[k] = m[k];
      whole &= (uint32_t)w[k] == c;
    }
    if (whole) break;
    if ((polls & 1023u) == 1023u) {
      if (aborted(ctx, op, p)) return false;
      const uint64_t now = global_timer_ns();
      if (!start) start = now;
      else if (now - start > ctx.timeout_ns) {
        report_error(ctx, SY_ERR_TIMEOUT, op, p, call, call, (uint32_t)w[0]);
        return false;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < V; i++) v[i] = (w[2 * i] >> 32) | (w[2 * i + 1] & 0xFFFFFFFF00000000ull);
  return true;
}

/* The all-to-all's mail: two values (written out rather than through the templates above, whose code for V = 2
 * differs: the all-to-all's kernel stays as measured). */
__device__ inline void post_mail(const dev_ctx &ctx, a2a_mail *mail, int p, uint64_t call, uint64_t v0, uint64_t v1) {
  a2a_mail *slot = mail + ctx.rank; /* our slot, at p */
  const uint64_t c = (uint32_t)call;
  const uint64_t w[4] = {(v0 << 32) | c, (v0 & 0xFFFFFFFF00000000ull) | c, (v1 << 32) | c,
                         (v1 & 0xFFFFFFFF00000000ull) | c};
  a2a_mail *remote = (a2a_mail *)peer_ctrl(ctx, slot, p);
  if (remote) {
    volatile uint64_t *r = remote->word;
    for (int k = 0; k < 4; k++) r[k] = w[k];
  } else {
    for (int k = 0; k < 4; k++) p_u64_cold(slot->word + k, w[k], p);
  }
}

/* Sender: waits (bounded) until receiver p's mail for `call` is whole, then returns its two values. */
__device__ inline bool wait_mail(const dev_ctx &ctx, const a2a_mail *mail, int p, uint64_t call, int op, uint64_t *v0,
                                 uint64_t *v1) {
  const volatile uint64_t *m = mail[p].word;
  const uint32_t c = (uint32_t)call;
  uint64_t w[4];
  uint64_t start = 0;
  for (uint32_t polls = 0;; polls++) {
    int whole = 1;
    for (int k = 0; k < 4; k++) {
      w[k] = m[k];
      whole &= (uint32_t)w[k] == c;
    }
    if (whole) break;
    if ((polls & 1023u) == 1023u) {
      if (aborted(ctx, op, p)) return false;
      const uint64_t now = global_timer_ns();
      if (!start) start = now;
      else if (now - start > ctx.timeout_ns) {
        report_error(ctx, SY_ERR_TIMEOUT, op, p, call, call, (uint32_t)w[0]);
        return false;
      }
    }
  }
  *v0 = (w[0] >> 32) | (w[1] & 0xFFFFFFFF00000000ull);
  *v1 = (w[2] >> 32) | (w[3] & 0xFFFFFFFF00000000ull);
  return true;
}

/* The lines of [src, src + bytes) on their way into L2, a line per thread of the block (no register waits for
 * them): a copy's source while the block waits for something else. */
__device__ __forceinline__ void prefetch_l2_block(const char *src, uint64_t bytes) {
  for (uint64_t off = (uint64_t)threadIdx.x * 128; off < bytes + 127; off += (uint64_t)blockDim.x * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(src + (off < bytes ? off : bytes - 1)));
}

/* Copy of `bytes` from src to dst by a group of nthreads threads (tid = rank in the group); dst may be a
 * peer's memory mapped over NVLink. 16-byte vectors with four loads in flight per thread when src and dst
 * share their alignment modulo 16; 4-byte or byte copies otherwise. Every thread of the group calls it. */
__device__ inline void copy_group(char *dst, const char *src, size_t bytes, unsigned tid, unsigned nthreads) {
  const uintptr_t mis = ((uintptr_t)dst ^ (uintptr_t)src);
  if ((mis & 15) == 0) {
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > bytes) head = bytes;
    if (tid < head) dst[tid] = src[tid];
    dst += head;
    src += head;
    bytes -= head;
    const size_t nvec = bytes / 16;
    uint4 *d = (uint4 *)dst;
    const uint4 *s = (const uint4 *)src;
    size_t i = tid;
    constexpr int UNROLL = 4;
    for (; i + (UNROLL - 1) * nthreads < nvec; i += UNROLL * nthreads) {
      uint4 v[UNROLL];
#pragma unroll
      for (int k = 0; k < UNROLL; k++) v[k] = __ldg(s + i + k * nthreads);
#pragma unroll
      for (int k = 0; k < UNROLL; k++) d[i + k * nthreads] = v[k];
    }
    for (; i < nvec; i += nthreads) d[i] = __ldg(s + i);
    const size_t tail = bytes - nvec * 16;
    if (tid < tail) dst[nvec * 16 + tid] = src[nvec * 16 + tid];
    return;
  }
  if ((mis & 3) == 0) {
    size_t head = (4 - ((uintptr_t)dst & 3)) & 3;
    if (head > bytes) head = bytes;
    if (tid < head) dst[tid] = src[tid];
    dst += head;
    src += head;
    bytes -= head;
    const size_t nw = bytes / 4;
    for (size_t i = tid; i < nw; i += nthreads) ((uint32_t *)dst)[i] = ((const uint32_t *)src)[i];
    const size_t tail = bytes - nw * 4;
    if (tid < tail) dst[nw * 4 + tid] = src[nw * 4 + tid];
    return;
  }
  for (size_t i = tid; i < bytes; i += nthreads) dst[i] = src[i];
}

__device__ __forceinline__ void copy_block(char *dst, const char *src, size_t bytes) {
  copy_group(dst, src, bytes, threadIdx.x, blockDim.x);
}

__device__ __forceinline__ void copy_warp(char *dst, const char *src, size_t bytes) {
  copy_group(dst, src, bytes, threadIdx.x & 31u, 32u);
}

} // namespace sy

#endif
