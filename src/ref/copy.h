/*
 * copy.h — how a reference executor (alltoall_ref.c, attn_ref.c) moves one contiguous run of bytes. The plain
 * executors use memcpy; the host backend passes its own, which copies in bounded pieces and stops when its group
 * aborts (host/group.c), so the rules of what lands where stay stated once.
 */
#ifndef SY_REF_COPY_H
#define SY_REF_COPY_H

#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copies bytes from src to dst (they do not overlap); returns 0 to go on, or a nonzero status that stops the
 * executor, which then returns it with the rest of its copies not made. */
typedef int (*sy_ref_copy_fn)(void *ctx, void *dst, const void *src, size_t bytes);

/* The plain executors' copy: memcpy, never stops. */
static inline int sy__ref_plain_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  memcpy(dst, src, bytes);
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif
