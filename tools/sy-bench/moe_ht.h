/*
 * moe_ht.h — what the files of sy-bench's entry `moe-ht` share (moe_ht.c: the shapes, the entry, its rows;
 * moe_ht_time.c: the calls, their timing, the baselines; moe_ht_check.c: the expectation, computed on the host
 * from switchyard.h's words, "MoE high throughput"). The checks take any shape, so that other callers (the soak)
 * can ask the same questions of small random ones.
 */
#ifndef SY_BENCH_MOE_HT_H
#define SY_BENCH_MOE_HT_H

#include "moe.h"

#define MOE_HT_POISON 0xEE /* outputs are filled with it before a checked call: rows left alone keep it */

/* ---- the expectation (moe_ht_check.c) ---------------------------------------------------------------------- */

/* One configuration as seen by one rank. unit_weights: the checked combine and combine_backward were called
 * with row_weights NULL (w = 1), else with recv.weights. */
typedef struct moe_ht_shape {
  int world, rank;
  int hidden, top_k, num_experts, alignment;
  sy_moe_wire_t wire; /* SY_MOE_WIRE_BF16, _FP8 or _FP8_UE8M0 (the kernel quantises) */
  int unit_weights;
  int scales_row_major; /* SY_MOE_HT_SCALES_ROW_MAJOR: recv.scales [rows][hidden / 128], else [hidden / 128][rows] */
} moe_ht_shape_t;

/* recv.scales' index of row r's scale g (of `rows` rows). */
static inline size_t moe_ht_scale_at(const moe_ht_shape_t *sh, size_t rows, size_t r, size_t g) {
  return sh->scales_row_major ? r * ((size_t)sh->hidden / SY_MOE_FP8_GROUP) + g : g * rows + r;
}

/* Every rank's inputs, on the host: rank s dispatched num_tokens[s] tokens with ids[s] ([n][top_k], -1 none)
 * and weights[s] ([n][top_k], or NULL: dispatched without weights); tokens(arg, s) gives rank s's bf16 tokens
 * [n][hidden], valid until the next call (a generator may regenerate them into one buffer). */
typedef struct moe_ht_inputs {
  const int *num_tokens;
  const int32_t *const *ids;
  const float *const *weights;
  const uint16_t *(*tokens)(void *arg, int rank);
  void *arg;
} moe_ht_inputs_t;

/* This rank's layout from every rank's ids: rows of each local expert, offsets (contiguous layout). */
typedef struct moe_ht_expect {
  int local;         /* L */
  int32_t *counts;   /* [L] */
  int32_t *offsets;  /* [L + 1]; [L]: rows needed, padding included */
  long long filled;  /* rows with a source: the sum of counts */
  long long padding; /* offsets[L] - filled */
} moe_ht_expect_t;

/* Host copies of what one checked round wrote on this rank, the outputs poisoned with MOE_HT_POISON before the
 * round: tokens and grad_rows up to rows_used = offsets[L] and the row after it (where rows allows), src,
 * weights, grad_weights and scales all `rows` (the rows past the last expert's must keep the poison). The round: exact layout (host_counts), dispatch,
 * combine of Y (the dispatched rows as bf16: x of the row's token), combine_backward with grad_out = x and
 * rows_in = Y, then dispatch's backward: sy_moe_ht_combine(grad_rows, row_weights NULL, row_values =
 * grad_weights). A NULL array is not checked. */
typedef struct moe_ht_got {
  int rows;                                      /* recv.rows (the group-major scales' row stride) */
  const int32_t *host_counts;                    /* [2 L + 1] from the exact layout */
  const int32_t *expert_offsets, *expert_counts; /* recv's, [L + 1] and [L] */
  const uint8_t *tokens;                         /* [rows_used + 1][row bytes] */
  const float *scales;                           /* FP8 wires: [hidden / 128][rows], or [rows][hidden / 128]
                                                  * (shape.scales_row_major) */
  const int32_t *src;                            /* [rows][2] */
  const float *weights;                          /* [rows] */
  const uint16_t *grad_rows;                     /* [rows_used + 1][hidden] */
  const float *grad_weights;                     /* [rows] */
  const uint16_t *out;                           /* the combine's, [num_tokens][hidden] */
  const uint16_t *grad_x;                        /* dispatch's backward, [num_tokens][hidden] */
  const float *token_values;                     /* dispatch's backward, [num_tokens][top_k] */
  int *printed;                                  /* mismatches printed so far, the first 8 are (NULL: 8 per check) */
} moe_ht_got_t;

/* Wrong elements per call of the round. */
enum { MOE_HT_LAYOUT, MOE_HT_DISPATCH, MOE_HT_COMBINE, MOE_HT_COMBINE_BWD, MOE_HT_DISPATCH_BWD, MOE_HT_OPS };
extern const char *const moe_ht_op_names[MOE_HT_OPS]; /* "layout", "dispatch", ... */

/* The expected layout (allocates; moe_ht_expect_free). Non-zero when out of memory or past int32 rows. */
int moe_ht_expect(const moe_ht_shape_t *sh, const moe_ht_inputs_t *in, moe_ht_expect_t *ex);
void moe_ht_expect_free(moe_ht_expect_t *ex);
/* Y, the combine's rows: x of each row's token at its row, bf16 [rows_used][hidden] (padding rows untouched). */
void moe_ht_fill_rows(const moe_ht_shape_t *sh, const moe_ht_inputs_t *in, const moe_ht_expect_t *ex, uint16_t *y);
/* Adds to wrong[] the mismatches of got against the expectation: the exact layout's counts; the experts' side
 * (recv, padding left alone, grad_rows, grad_weights); the tokens' side (out, grad_x, token_values). The first
 * few are printed (what, rank, element, got, want). Non-zero when out of memory. */
int moe_ht_check(const moe_ht_shape_t *sh, const moe_ht_inputs_t *in, const moe_ht_expect_t *ex,
                 const moe_ht_got_t *got, long long wrong[MOE_HT_OPS]);

/* Row bytes on the wire and in recv.tokens (E4M3 or bf16), and the scales' bytes per row. */
static inline size_t moe_ht_row_bytes(sy_moe_wire_t wire, int hidden) {
  return wire == SY_MOE_WIRE_BF16 ? (size_t)hidden * 2 : (size_t)hidden;
}
static inline size_t moe_ht_scale_bytes(sy_moe_wire_t wire, int hidden) {
  return wire == SY_MOE_WIRE_BF16 ? 0 : (size_t)hidden / SY_MOE_FP8_GROUP * sizeof(float);
}

/* ---- the benchmark's buffers and calls (moe_ht_time.c) ------------------------------------------------------ */

typedef struct moe_ht_bench {
  sy_moe_ht_t moe;
  sy_moe_ht_config_t cfg;
  sy_moe_ht_sizes_t sizes;
  int tokens;
  /* this rank's inputs, for the largest token count (device) */
  void *x;                 /* bf16 [T][hidden]: tokens, and the combine_backward's grad_out */
  void *ids;               /* [T][top_k] of id_type */
  sy_index_type_t id_type; /* SY_INDEX_INT32 (0) unless set */
  float *weights;          /* [T][top_k] */
  /* the configuration's buffers (device; sized by sy_moe_ht_sizes) */
  void *handle;
  sy_moe_ht_recv_t recv; /* recv.rows = max_rows: the worst case */
  int recv_arena;        /* recv from the object's receive arena (sy_moe_ht_recv_alloc with pool NULL) */
  void *y;               /* bf16 [rows][hidden]: the combine's rows_in */
  void *grad_rows;       /* bf16 [rows][hidden] */
  float *grad_weights;   /* [rows] */
  void *out, *grad_x;    /* bf16 [T][hidden] */
  float *token_values;   /* [T][top_k] */
  int32_t *host_counts;  /* [2 L + 1], host */
  int counts_valid;      /* host_counts holds an exact layout's answer for the inputs of the next round */
  int unit_weights;      /* the round's combine and combine_backward: row_weights NULL (else recv.weights) */
  int *printed;          /* the round's check: mismatches printed so far (moe_ht_got_t); NULL: 8 per round */
  sy_status_t last;      /* the last call's status */
  /* the baselines */
  moe_bench_t nccl; /* its NCCL pair fields only (moe_nccl_pairs, moe_op_nccl) */
  void *copy_src, *copy_dst;
  size_t copy_bytes;
} moe_ht_bench_t;

/* One checked round on b's buffers (moe_ht_round.c): the outputs poisoned; the layout (exact: with host_counts,
 * then checked; else worst case, host_counts checked where b->counts_valid), dispatch (of b->x with b->weights, or
 * NULL where in->weights[rank] is), combine of Y, combine_backward (grad_out = b->x, rows_in = Y), dispatch's
 * backward, until a call answers SY_ERR_UNSUPPORTED; then what they wrote against moe_ht_check. Y: recv.tokens on
 * the BF16 wire, else b->y filled with each row's token. b->ids, id_type, x and weights hold this rank's inputs
 * of `in`. wrong[op]: the most wrong elements of any rank, -1 for a call that did not run. Non-zero when a call
 * failed (any rank). Collective. */
int moe_ht_round(bench_ctx_t *ctx, moe_ht_bench_t *b, const moe_ht_shape_t *sh, const moe_ht_inputs_t *in,
                 const moe_ht_expect_t *ex, int exact, long long wrong[MOE_HT_OPS]);

/* The calls as bench_op_fn (arg: the moe_ht_bench_t): worst-case layout, dispatch, weighted combine of y,
 * combine_backward (grad_out = x, rows_in = y, the row weights' gradient), dispatch's backward (combine of
 * grad_rows, row_weights NULL, row_values = grad_weights, token_values); each sets b->last. */
int moe_ht_op(bench_ctx_t *ctx, moe_ht_bench_t *b, int op);
/* The exact layout: host_counts filled; b->last set. */
int moe_ht_op_exact_layout(bench_ctx_t *ctx, moe_ht_bench_t *b);
/* One call of op, then (every rank agreeing it ran) bench_time over it. Returns 0 when timed, 1 on failure,
 * and sets *unsupported (0 otherwise) where some rank's call answered SY_ERR_UNSUPPORTED (nothing timed). */
int moe_ht_time_op(bench_ctx_t *ctx, moe_ht_bench_t *b, int op, bench_timing_t *t, int *unsupported);
/* The configuration's buffers (after sy_moe_ht_sizes), filled: y with bf16 0x3F3F, the others poisoned. */
int moe_ht_alloc_config(bench_ctx_t *ctx, moe_ht_bench_t *b);
void moe_ht_free_config(bench_ctx_t *ctx, moe_ht_bench_t *b);
/* The memory ceiling: cudaMemcpyAsync device to device of `bytes`, timed (cuda backend). */
int moe_ht_time_copy(bench_ctx_t *ctx, moe_ht_bench_t *b, size_t bytes, bench_timing_t *t);

#endif
