/*
 * attn_ref.c — the attention dispatch's reference executor: a receiver's row copies by its plan's receive
 * lists, and the KV backward's post-process (sum of the replicas in fp32 in replica order, or each replica
 * apart). What these produce is what the operation means; the CUDA kernels match it byte for byte.
 * Built with -O2 and no fast-math: the fp32 adds below must stay in order, unfused and unreassociated.
 */
#include "ref/attn_ref.h"
#include "plan/attn_plan.h"

#include <string.h>

size_t sy__dtype_size(sy_dtype_t dtype) {
  switch (dtype) {
    case SY_DTYPE_BF16:
    case SY_DTYPE_FP16: return 2;
    case SY_DTYPE_FP32: return 4;
  }
  return 0;
}

int sy__ref_attn_pull_by(const struct sy_attn_plan *plan, int dir, const void *const *src, size_t row_bytes, void *dst,
                         sy_ref_copy_fn copy, void *ctx) {
  const sy_attn_dir_t *d = &plan->dir[dir];
  for (int s = 0; s < plan->world_size; s++) {
    for (int64_t i = d->recv_start[s]; i < d->recv_start[s + 1]; i++) {
      const sy_attn_seg_t *seg = &d->recv_segs[i];
      int stop = copy(ctx, (char *)dst + (size_t)seg->dst_row * row_bytes,
                      (const char *)src[s] + (size_t)seg->src_row * row_bytes, (size_t)seg->rows * row_bytes);
      if (stop) return stop;
    }
  }
  return 0;
}

void sy__ref_attn_pull(const struct sy_attn_plan *plan, int dir, const void *const *src, size_t row_bytes, void *dst) {
  sy__ref_attn_pull_by(plan, dir, src, row_bytes, dst, sy__ref_plain_copy, NULL);
}

static float load_element(const unsigned char *p, sy_dtype_t dtype) {
  if (dtype == SY_DTYPE_FP32) {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, sizeof h);
  return dtype == SY_DTYPE_BF16 ? sy__bf16_to_float(h) : sy__fp16_to_float(h);
}

static void store_element(unsigned char *p, sy_dtype_t dtype, float value) {
  if (dtype == SY_DTYPE_FP32) {
    memcpy(p, &value, sizeof value);
    return;
  }
  uint16_t h = dtype == SY_DTYPE_BF16 ? sy__float_to_bf16(value) : sy__float_to_fp16(value);
  memcpy(p, &h, sizeof h);
}

void sy__ref_attn_kv_reduce(const struct sy_attn_plan *plan, const void *staging, size_t row_bytes, sy_dtype_t dtype,
                            unsigned flags, void *out) {
  const int C = plan->max_replicas;
  const size_t N = (size_t)plan->num_tokens;
  const size_t elem = sy__dtype_size(dtype);
  const unsigned char *in = staging;
  unsigned char *o = out;
  for (int s = 0; s < plan->num_seqs; s++) {
    const sy_attn_seq_place_t *replica = plan->kv_send + (size_t)s * (size_t)C; /* dst_rank -1: none */
    for (int64_t token = plan->seq_start[s]; token < plan->seq_start[s + 1]; token++) {
      const size_t t = (size_t)token;
      if (flags & SY_ATTN_UNSUMMED) {
        for (int c = 0; c < C; c++) {
          unsigned char *row = o + ((size_t)c * N + t) * row_bytes;
          if (replica[c].dst_rank < 0) memset(row, 0, row_bytes);
          else memcpy(row, in + ((size_t)c * N + t) * row_bytes, row_bytes);
        }
        continue;
      }
      unsigned char *row = o + t * row_bytes;
      int first = 0;
      while (first < C && replica[first].dst_rank < 0) first++;
      if (first == C) {
        memset(row, 0, row_bytes);
        continue;
      }
      for (size_t e = 0; e < row_bytes; e += elem) {
        float sum = load_element(in + ((size_t)first * N + t) * row_bytes + e, dtype);
        for (int c = first + 1; c < C; c++)
          if (replica[c].dst_rank >= 0)
            sum = sy__ref_add_f32(sum, load_element(in + ((size_t)c * N + t) * row_bytes + e, dtype));
        store_element(row + e, dtype, sum);
      }
    }
  }
}
