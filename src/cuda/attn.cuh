/*
 * attn.cuh — the attention plan as the kernel reads it (attn.cu) and as its upload writes it (attn_plan.cu): one
 * device allocation holding each direction's send lists, the sequences' starts and the KV destinations.
 */
#ifndef SY_CUDA_ATTN_CUH
#define SY_CUDA_ATTN_CUH

#include <stdint.h>

#include "plan/attn_plan.h"

namespace sy {

/* Device copy of one direction's send lists. segs: 4 int64 per segment {src_row, dst_row, rows, cum}, cum =
 * rows of the same peer before this segment. */
struct attn_dir_dev {
  const int64_t *send_start; /* [W + 1] */
  const int64_t *segs;
  const int64_t *send_rows; /* [W] */
  const int64_t *recv_rows; /* [W] */
};

struct attn_plan_dev {
  attn_dir_dev dir[SY_ATTN_DIRS];
  const int64_t *seq_start; /* [num_seqs + 1] */
  const int *kv_dst;        /* [num_seqs * C] */
  void *blob;               /* the one device allocation, from pool */
  sy_pool_t pool;
};

} // namespace sy

#endif
