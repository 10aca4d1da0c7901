/*
 * layer.h — what the files of sy-bench's entry `layer` share (layer.c: the entry, prefill over the high-throughput
 * mode; layer_ll.c: decode over the low-latency mode; layer_ffn.c: the experts' GEMMs, buffers and the check
 * against the CPU reference). One MoE layer: route given, dispatch, y = relu(x W1_e) W2_e per expert e (each
 * expert's own W1 [H][F] and W2 [F][H], layer_weights.h; or, with --expert-weights shared, one W1 and one W2 for
 * every expert: every expert's FLOPs, one expert's weight bytes), weighted combine.
 */
#ifndef SY_BENCH_LAYER_H
#define SY_BENCH_LAYER_H

#include <cublasLt.h>

#include "bench.h"

#define LAYER_TOL    0.03 /* |got - want| <= LAYER_TOL x (|want| + mean |want|) + slack (layer_ffn.c) */
#define LAYER_MAX_MB 8    /* --micro-batches: at most this many in ways b and c */

typedef struct mb { /* one micro-batch of the high-throughput step */
  int T, first;     /* tokens, its first token in the step */
  int S;            /* its masked layout's stride: rows an expert (layer_max_rows) */
  int e0, ne;       /* by expert groups (--split experts): its local experts e0 .. e0 + ne - 1; else 0, L */
  int32_t *ids;     /* by expert groups: the step's ids with every other expert -1, [T][K]; else NULL */
  uint16_t *out;    /* by expert groups with --group-sum kernel: its combine's partial output, [T][H]; else NULL */
  uint16_t *dx;     /* the same of the dispatch's backward */
  void *handle;     /* the layout's */
  sy_moe_ht_recv_t recv;
  uint16_t *mid, *y;         /* [L S][F], [L S][H] */
  uint16_t *dy, *dmid, *dxr; /* the backward's: [L S][H], [L S][F], [L S][H] */
} mb_t;

typedef struct layer_bench {
  bench_ctx_t *ctx;
  int gpu, H, F, E, K, L, T, sms;
  int nmb;                     /* micro-batches of ways b and c (--micro-batches, default 2) */
  int by_experts;              /* ways b and c's micro-batches are groups of each rank's experts (--split experts) */
  int group_add;               /* by expert groups: each group's combine after the first adds into the output
                                * (sy_moe_ht_combine_add), no partial outputs (--group-sum add, the default) */
  int layers;                  /* MoE layers a step (--layers, default 1): every way runs them all */
  int gemm_sms;                /* the GEMMs' SM count target beside the communication (cublasLt; 0: the device's) */
  int beside;                  /* of a micro-batch's L experts, the GEMMs of the first `beside` run on gemm_sms beside
                                * the communication, the rest on every SM after it (--gemm-beside F: F x L; L: all) */
  uint16_t *x, *w1, *w2, *out; /* [T][H], [L][H][F], [L][F][H] ([1].. with shared weights), [T][H] */
  int shared;                  /* one W1 and one W2 for every expert (--expert-weights shared) */
  uint16_t *dout, *dx;         /* the backward's: the output's gradient in, the tokens' out; [T][H] */
  uint16_t *dout_h;
  int32_t *ids;                /* [T][K] */
  float *weights;              /* [T][K] */
  uint16_t *x_h, *w1_h, *w2_h; /* host copies for the reference; w1_h, w2_h: expert w_expert's ([H][F], [F][H]) */
  int w_expert;                /* -1: none yet */
  double *ref[2];              /* the reference's sampled tokens, forward and backward: [samples][2][H] (want,
                                * slack), made once a shape */
  int ref_samples[2];          /* how many ref[d] holds (0: none yet) */
  int32_t *ids_h;
  float *weights_h;
  /* prefill: the high-throughput mode, masked layouts */
  sy_moe_ht_t moe;
  int end_sms;               /* --end-sms: the step's ends' SM budget (the object's config.num_sms); 0: none */
  int all_ends;              /* way s: every communication call at end_sms, not only the ends' */
  mb_t mb[LAYER_MAX_MB + 1]; /* 0: the whole step (a); 1 .. nmb: the micro-batches (b, c) */
  /* decode: the low-latency mode; an object a micro-batch (its halves alternate dispatch and combine) */
  struct llmb {
    sy_moe_t moe;
    sy_moe_recv_t recv;
    uint16_t *mid, *y;        /* [L][slots][F], [L][slots][H] (the combine's expert_out) */
    int T, first, slots, cap; /* the GEMMs run over each expert's first cap slots */
  } ll[LAYER_MAX_MB + 1];     /* 0: the whole step (a); 1 .. nmb: the micro-batches (b, c) */
  /* the GPU's */
  cudaStream_t compute;
  cudaEvent_t ev[3 * LAYER_MAX_MB];
  cublasLtHandle_t lt;
  void *lt_work;
  size_t lt_work_bytes;
} layer_bench_t;

/* layer_ffn.c */
void *layer_buf(layer_bench_t *b, size_t n); /* device memory (host backend: host), zeroed */
void layer_unbuf(layer_bench_t *b, void *p);
int layer_put(layer_bench_t *b, void *dst, const void *src, size_t n);
int layer_get(layer_bench_t *b, void *dst, const void *src, size_t n);
/* The inputs every way shares (x, ids, weights, W1, W2 on both sides) and the GPU's streams and cublasLt. */
int layer_setup_common(layer_bench_t *b);
void layer_teardown_common(layer_bench_t *b);
/* y = relu(in W1_e) W2_e for the local experts e0 .. e0 + experts - 1, `rows` rows each, expert e's rows at e x stride
 * (in rows) in in, mid and y; sms: the SM count cublasLt targets (0: the device's; a micro-batch's GEMMs run beside
 * communication). */
int layer_ffn(layer_bench_t *b, const uint16_t *in, uint16_t *mid, uint16_t *y, int rows, int stride, int e0,
              int experts, int sms, cudaStream_t stream);
/* The backward of layer_ffn: dmid = (dy W2^T) where the forward's mid > 0, else 0; dxr = dmid W1^T. */
int layer_ffn_backward(layer_bench_t *b, const uint16_t *dy, const uint16_t *mid, uint16_t *dmid, uint16_t *dxr,
                       int rows, int stride, int e0, int experts, int sms, cudaStream_t stream);
/* Which of a micro-batch's GEMMs a compute part runs (layer_gemm_fn), and the experts it takes. */
enum {
  LAYER_GEMM_ALL,    /* every local expert: the whole step's on every SM, a micro-batch's on gemm_sms */
  LAYER_GEMM_BESIDE, /* a micro-batch's first `beside` experts, on gemm_sms (beside the communication) */
  LAYER_GEMM_AFTER   /* the rest, on every SM (after the communication beside the first part has ended) */
};
void layer_gemm_experts(const layer_bench_t *b, int part, int *e0, int *experts);
/* The most rows any of this rank's experts gets from the tokens [first, first + T) of every rank (each rank's
 * routing regenerated here), the most over the ranks, rounded up to 16 (at least 16): the masked layouts' bound. */
int layer_max_rows(layer_bench_t *b, int first, int T);
/* out ([T][H]) filled with bf16 0x7f7f (~3.4e38, finite), synchronously: what a checked way must overwrite. */
int layer_poison(layer_bench_t *b, uint16_t *out);
/* out = the parts' sum ([T][H] each; layer_sum_parts on the GPU, the same sum on the host). */
int layer_sum(layer_bench_t *b, uint16_t *out, uint16_t *const *part, int n, cudaStream_t stream);
/* Micro-batch m's tokens and first token (m = 0: the whole step; by expert groups every micro-batch is every token). */
void layer_split(const layer_bench_t *b, int m, int *T, int *first);
/* Part m (1 .. n) of n over L units (local experts; layer_split: tokens): its first unit and how many, [L x before /
 * total, L x (before + w_m) / total) rounded down, before the weights of the parts ahead of it and total all n's (w:
 * the --micro-batches weights, or w[0] == 0 for parts as even as L allows). A part can get none: the caller checks. */
void layer_group(const int *w, int n, int L, int m, int *e0, int *ne);
/* Sampled tokens of b->out (backward: of b->dx) against the CPU reference: the wrong elements (-1: could not read
 * them). */
long long layer_check(layer_bench_t *b, int samples, int backward);
/* layer_mask.cu (layer_mask_absent.c without nvcc): d[i] = 0 where mid[i] is not > 0. */
int layer_relu_mask(uint16_t *d, const uint16_t *mid, size_t n, cudaStream_t stream);
/* layer_mask.cu: out[i] = bf16(part[0][i] + .. + part[n - 1][i]), the sum in fp32 in that order, rounded once; n <=
 * LAYER_MAX_MB. */
int layer_sum_parts(uint16_t *out, uint16_t *const *part, int n, size_t count, cudaStream_t stream);
/* layer_mask.cu: w[e][i] = layer_weight(seed, first_expert + e, i, scale) for e < experts, i < per; synchronises. */
int layer_fill_weights(uint16_t *w, uint32_t seed, int first_expert, int experts, size_t per, float scale,
                       cudaStream_t stream);
/* A shape's step in three parts, for micro-batch m (0: the whole step; 1, 2: its halves): the communication before
 * the GEMMs, the GEMMs, the communication after them. */
typedef int (*layer_part_fn)(layer_bench_t *b, int m, cudaStream_t s);
typedef int (*layer_gemm_fn)(layer_bench_t *b, int m, int part, cudaStream_t s); /* part: LAYER_GEMM_* */
typedef struct layer_parts {
  const char *shape;
  layer_part_fn comm1;
  layer_gemm_fn compute;
  layer_part_fn comm2;
  int check; /* 1: b->out against the forward's reference; 2: b->dx against the backward's */
} layer_parts_t;

/* The micro-batches (m = 1 .. nmb) over two streams: comm1(m) for each on sc, each followed by an event;
 * compute(m) on the second stream after its comm1; comm2(m) on sc after its compute — so one micro-batch's
 * communication runs beside another's GEMMs, and the communication calls stay one at a time on sc. With beside < L
 * a micro-batch's GEMMs are two parts: the first `beside` experts' on gemm_sms, the rest's on every SM once the
 * communication that runs beside it has ended (micro-batch 1: the last comm1; m > 1: comm2(m - 1)), so the SMs the
 * communication holds are given up only while it runs. Host backend: in that order, one after the other. */
int layer_two_streams(layer_bench_t *b, cudaStream_t sc, const layer_parts_t *p);

/* A shape's ways, in the order layer_run_shape times them (the indices of its us and enq). */
enum {
  WAY_COMM,    /* comm1 + comm2 of the whole step, alone */
  WAY_COMPUTE, /* the whole step's GEMMs alone, on every SM */
  WAY_GEMMS,   /* the micro-batches' GEMMs alone, in turn, on the SMs ways b and c give them (prefill: those the
                * communication leaves; decode: every SM), on the values a way-b step left in their buffers */
  WAY_A,       /* the three parts in turn */
  WAY_B,       /* layer_two_streams */
  WAY_C,       /* b captured once in a graph cache and replayed */
  WAY_S,       /* a with every communication call on the object's SMs (--end-sms: sy_moe_ht_set_num_sms), the GEMMs
                * on every SM: the step with no overlap and no SM given up, what b and c must beat */
  LAYER_WAYS
};

/* Times a shape's ways (above), checks a, b and c against the CPU reference, prints the table with each of a, b
 * and c's overlap efficiency (t_comm + t_compute - t) / min(t_comm, t_compute); us and enq [LAYER_WAYS] get the
 * step and enqueue times. Returns the wrong count (or -1). */
int layer_run_shape(layer_bench_t *b, const layer_parts_t *p, double *us, double *enq);

/* layer_ll.c: the decode step at b->T tokens (b->T <= 256). */
int layer_decode(layer_bench_t *b);

#endif
