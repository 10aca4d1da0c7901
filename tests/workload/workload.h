/*
 * workload.h — the seeded inputs the CPU tests (tests/unit), the GPU tests (tests/gpu) and sy-bench share, in
 * one place: the random numbers, MoE routing, tokens, weights and expert outputs, attention plan descriptions
 * and the rows and gradients those plans move. It sits before the data's path: what a test or a benchmark
 * hands the library. Built as the static library sy_workload from switchyard.h alone (no src/ on its include
 * path), so the GPU tests still see only what a user sees.
 *
 * Only the inputs live here. What a call must produce (the expectation) stays with each test, written from
 * the header's words; a test may call a generator below to know an input value again.
 *
 * Every generator reproduces bit for bit what its callers drew before it moved here: sy-bench's figures are
 * compared across commits, and a test's seed must keep meaning the same inputs. Where the CPU and GPU tests
 * had drifted apart, both draws are kept and the caller picks one (wl_draw_t).
 */
#ifndef SY_WORKLOAD_H
#define SY_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- random numbers: splitmix64 ---------------------------------------------------------------------------- */

#define WL_GAMMA 0x9e3779b97f4a7c15ull /* splitmix64's increment */

/* splitmix64's output for the state x (x plus the increment, finalised): a hash of x, for keyed values that
 * any rank can regenerate for any position. */
static inline uint64_t wl_mix(uint64_t x) {
  x += WL_GAMMA;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* splitmix64's next number: wl_mix of the state, which then advances by the increment. */
static inline uint64_t wl_rand(uint64_t *state) {
  const uint64_t x = *state;
  *state += WL_GAMMA;
  return wl_mix(x);
}

/* Which of two historical draws a generator makes where the CPU and GPU tests had each written their own. */
typedef enum wl_draw {
  WL_DRAW_UNIT, /* tests/unit's */
  WL_DRAW_GPU   /* tests/gpu's */
} wl_draw_t;

/* ---- MoE: seeded cases (the tests) ----------------------------------------------------------------------------
 * Every value is a function of (seed, salt, what, round, rank, position), so each rank regenerates every rank's
 * inputs of any round. Keys `what` 1..7 are the generators'; callers key their own choices with 8 and above. */

typedef enum wl_route {
  WL_ROUTE_RANDOM,     /* top_k distinct experts, about one id in eight -1 (the GPU draw: also one token in
                          sixteen with no expert) */
  WL_ROUTE_ONE_EXPERT, /* every token to the round's one expert (wl_moe_target), its other k random or -1 */
  WL_ROUTE_EMPTY_RANK, /* random, and rank (round % world) dispatches no token */
  WL_ROUTE_SAME_RANK,  /* 2 or more of a token's experts on one rank */
  WL_ROUTE_NONE,       /* every id -1: tokens with no expert */
  WL_ROUTE_FULL,       /* random, every rank max_tokens tokens */
  WL_ROUTE_MIXED       /* max_tokens tokens, round r routed as random, one expert, same rank, random, none
                          (r % 5) */
} wl_route_t;

typedef struct wl_moe {
  uint64_t seed, salt;
  int world, num_experts, top_k, hidden, max_tokens;
  wl_route_t route;
  int specials;   /* NaN, infinities, -0.0 and subnormals among the tokens and the expert outputs */
  wl_draw_t draw; /* the routing's draw (wl_moe_ids); everything else is the same in both */
} wl_moe_t;

uint64_t wl_moe_key(uint64_t seed, uint64_t salt, uint64_t what, uint64_t round, uint64_t rank);
wl_route_t wl_moe_route(const wl_moe_t *m, int round); /* the route of `round` (WL_ROUTE_MIXED's changes) */
int64_t wl_moe_target(const wl_moe_t *m, int round);   /* WL_ROUTE_ONE_EXPERT's expert in `round` */
/* Tokens rank `rank` dispatches in `round` (0 .. max_tokens). */
int wl_moe_num_tokens(const wl_moe_t *m, int round, int rank);
/* Expert ids [n][top_k], -1 for none, as int64 (a caller wanting int32 narrows them). */
void wl_moe_ids(const wl_moe_t *m, int round, int rank, int n, int64_t *ids);
/* bf16 tokens [n][hidden]: each 128-element group its own magnitude (2^-27 .. 2^22), elements within 2^7 of
 * it, one group in sixteen all zero, one element in 64 zero, one in 50 subnormal. */
void wl_moe_tokens(const wl_moe_t *m, int round, int rank, int n, uint16_t *tokens);
/* fp32 weights [n][top_k] (which 0: the dispatch's, 1: the combine's): full mantissa in (-1, 1), some tiny. */
void wl_moe_weights(const wl_moe_t *m, int round, int rank, int n, int which, float *weights);
/* Element h of local expert `expert`'s output in slot `slot` on rank `rank`, bf16; and its whole row [hidden]. */
uint16_t wl_moe_expert_out(const wl_moe_t *m, int round, int rank, int expert, int slot, int h);
void wl_moe_expert_row(const wl_moe_t *m, int round, int rank, int expert, int slot, uint16_t *row);

/* ---- MoE: uniform inputs (sy-bench moe-ll) -------------------------------------------------------------------
 * One stream per (rank, tokens): the same for every wire and mode at that size. */

/* top_k distinct experts per token, uniformly, as int32 [tokens][top_k]; weights [tokens][top_k] in (0, 1]
 * (NULL: drawn and dropped, so every rank's ids stay the same whether or not it keeps the weights). */
void wl_moe_uniform_routing(int rank, int tokens, int num_experts, int top_k, int32_t *ids, float *weights);
/* The same drawn from the experts [first, first + candidates) only (top_k <= candidates): a skewed routing, e.g. a
 * rank's own experts; with first 0 and candidates num_experts, wl_moe_uniform_routing's ids. */
void wl_moe_range_routing(int rank, int tokens, int first, int candidates, int top_k, int32_t *ids, float *weights);
/* One expert group's routing, in place: every id of the n whose local index (id mod L, L experts a rank) is outside
 * [e0, e0 + ne) set to -1 (the -1 entries stay). */
void wl_moe_keep_experts(int32_t *ids, size_t n, int L, int e0, int ne);
/* bf16 tokens [tokens][hidden]: finite, non-zero, in (-4, 4). */
void wl_moe_uniform_tokens(int rank, int tokens, int hidden, uint16_t *x);

/* ---- MoE high throughput: seeded steps (the tests) -------------------------------------------------------------
 * Every value is a function of (seed, what, rank, position), so each rank regenerates every rank's inputs. */

typedef enum wl_ht_route {
  WL_HT_UNIFORM,     /* top_k distinct experts drawn uniformly, about one id in eight -1 */
  WL_HT_ZIPF,        /* distinct experts drawn by Zipf's law (weight 1 / i for the i-th of a seeded order of the
                        experts): a few hot experts, a long tail; about one id in eight -1 */
  WL_HT_ONE_EXPERT,  /* every token to the one expert wl_moe_ht_target (at k = token % top_k), its other k -1 */
  WL_HT_EMPTY_RANKS, /* uniform, and ranks r with r % 3 == seed % 2 dispatch no token (at W >= 2 one at least) */
  WL_HT_SPARSE,      /* uniform over a seeded third of the experts only: the others get no rows (ids -1 where a
                        token finds no free one of them) */
  WL_HT_ROUTES
} wl_ht_route_t;

typedef struct wl_moe_ht {
  uint64_t seed;
  int world, num_experts, top_k, hidden, max_tokens;
  wl_ht_route_t route;
} wl_moe_ht_t;

const char *wl_moe_ht_route_name(int route);
/* Tokens rank `rank` dispatches (0 .. max_tokens): max_tokens one time in three, else any, 0 on empty ranks. */
int wl_moe_ht_num_tokens(const wl_moe_ht_t *m, int rank);
int64_t wl_moe_ht_target(const wl_moe_ht_t *m); /* WL_HT_ONE_EXPERT's expert */
/* Expert ids [n][top_k] as int32, -1 for none, distinct within a token. */
void wl_moe_ht_ids(const wl_moe_ht_t *m, int rank, int n, int32_t *ids);
/* Row `row` (hidden bf16) of rank `rank`'s buffer `which` (the caller's numbering: tokens, expert outputs,
 * gradients). exact: integers in [-3, 3], so that every sum and product of a few of them (with
 * wl_moe_ht_value's exact values) is exact in bf16 and fp32; else finite values with a magnitude per 128-element
 * group (2^-27 .. 2^22), one element in 64 zero, one in 50 subnormal. And rows [0, rows). */
void wl_moe_ht_row(const wl_moe_ht_t *m, int which, int rank, int64_t row, int exact, uint16_t *out);
void wl_moe_ht_rows(const wl_moe_ht_t *m, int which, int rank, int64_t rows, int exact, uint16_t *out);
/* Value `index` of rank `rank`'s fp32 buffer `which` (weights, per-row values). exact: +-0.5, +-1 or +-2; else
 * a full mantissa in (-1, 1), one in seven scaled by 2^-12. And [0, count). */
float wl_moe_ht_value(const wl_moe_ht_t *m, int which, int rank, int64_t index, int exact);
void wl_moe_ht_values(const wl_moe_ht_t *m, int which, int rank, int64_t count, int exact, float *out);
/* SY_MOE_WIRE_FP8_GIVEN's tokens: E4M3 bytes [rows][hidden] (no NaN) and fp32 scales [rows][hidden / 128]
 * (positive, 2^-10 .. 2^10 with a mantissa), rank `rank`'s buffer `which`. */
void wl_moe_ht_fp8(const wl_moe_ht_t *m, int which, int rank, int64_t rows, uint8_t *q, float *scales);

/* ---- attention plan descriptions ------------------------------------------------------------------------------ */

typedef enum wl_attn_kind {
  WL_ATTN_RANDOM,        /* random destinations, some -1 */
  WL_ATTN_ALL_TO_ONE,    /* every Q row and every KV row to one rank */
  WL_ATTN_EMPTY_RANK,    /* random, and one rank with no sequences */
  WL_ATTN_ALL_MINUS_ONE, /* every destination -1 */
  WL_ATTN_EMPTY_SEQS,    /* random, and one sequence in three empty (0 tokens; packed variable-length batches) */
  WL_ATTN_KINDS
} wl_attn_kind_t;

const char *wl_attn_kind_name(int kind);

/* A generated description and the arrays it points at (W ranks, C = max_replicas). */
typedef struct wl_attn_desc {
  int W, C;
  int *num_seqs;            /* [W] */
  int64_t *num_tokens;      /* [W]: the sum of the rank's lens */
  int64_t **lens;           /* [W][num_seqs] */
  int **q_dst, **kv_dst;    /* [W][num_seqs], [W][num_seqs * C] */
  sy_attn_plan_desc_t desc; /* points at the arrays above */
} wl_attn_desc_t;

/* Short sequences: per rank up to max_seqs sequences of 1..40 tokens (one in four up to 300), Q to a random
 * rank or -1, KV to C distinct ranks (a shuffle) with some slots -1; `kind` as above.
 *   WL_DRAW_UNIT: state wl_mix(seed); every rank has a sequence or more except under WL_ATTN_EMPTY_RANK; the
 *     one rank of WL_ATTN_ALL_TO_ONE and the empty rank are drawn; Q -1 one in six, KV -1 one in five
 *     (WL_ATTN_RANDOM and WL_ATTN_EMPTY_SEQS); WL_ATTN_ALL_TO_ONE sends replica (i % C) of sequence i.
 *   WL_DRAW_GPU: state seed; WL_ATTN_RANDOM gives a rank no sequences one time in five, WL_ATTN_EMPTY_RANK
 *     empties the last rank, WL_ATTN_ALL_TO_ONE sends to rank 0 (replica 0); Q -1 one in eight, KV -1 one in
 *     six (every kind).
 * Returns 0, or -1 when out of memory (d is then freed). */
int wl_attn_short_seqs(wl_attn_desc_t *d, int W, int C, wl_attn_kind_t kind, int max_seqs, wl_draw_t draw,
                       uint64_t seed);
/* sy-bench's documents: `tokens` per rank cut into documents of 256..16K tokens (the last takes the rest), Q to a
 * random rank, KV to two distinct random ranks (C = min(replicas, W), replicas 1 or 2); with `even`, W
 * sequences of tokens / W instead, sequence i to rank i for Q, to ranks i and i + 1 for KV. Returns 0, or -1
 * when out of memory or replicas is not 1 or 2 (d is then freed). */
int wl_attn_documents(wl_attn_desc_t *d, int W, int replicas, int64_t tokens, int even, uint64_t seed);
void wl_attn_desc_free(wl_attn_desc_t *d);

/* ---- payload rows and gradients --------------------------------------------------------------------------------
 * Three encodings of (buffer, source rank, row, byte), each never zero, kept apart because each caller checks
 * against its own: */

/* The CPU tests': row `row` of rank `rank`'s buffer `which` in `round`, bytes 1..255 from wl_mix of the key. */
void wl_payload_row(unsigned char *out, uint64_t seed, int which, int rank, int64_t row, uint64_t round,
                    size_t row_bytes);
void wl_payload_fill(unsigned char *out, uint64_t seed, int which, int rank, int64_t rows, uint64_t round,
                     size_t row_bytes);

/* The GPU tests': byte `index` of what `src` sends `dst` in round `seed` (odd, so never zero); and rows
 * [0, rows) of rank `rank`'s buffer `which`: byte b of row i is wl_payload_byte(seed + which, rank, i & 0xFFFF,
 * i * row_bytes + b). */
uint8_t wl_payload_byte(uint64_t seed, int src, int dst, uint64_t index);
void wl_payload_fill_odd(uint8_t *out, int64_t rows, size_t row_bytes, uint64_t seed, int rank, int which);

/* sy-bench's: 8-byte word w of row `row` of rank `src`'s buffer `which` (0 = Q, 1 = KV); rows [0, rows). */
uint64_t wl_payload_word(int src, int which, int64_t row, size_t w);
void wl_payload_fill_words(uint64_t *out, int src, int which, int64_t rows, size_t row_bytes);

/* KV-backward gradients, elements of dtype. The CPU tests': element e of row `row` of rank `rank` in `round`,
 * finite, sign and exponent mixed, one in 17 subnormal, one in 61 a -0.0, small enough that no sum of 8
 * overflows (the bits in the low 16 for bf16 and fp16); rows [0, rows) of row_bytes, whole elements only. */
uint32_t wl_grad_bits(uint64_t seed, sy_dtype_t dtype, int rank, int64_t row, size_t e, uint64_t round);
void wl_grad_fill(unsigned char *out, uint64_t seed, sy_dtype_t dtype, int rank, int64_t rows, size_t row_bytes,
                  uint64_t round);
/* The GPU tests': one element in 32 special (-0, +0, +-inf, NaNs with payloads, subnormals, the largest finite),
 * the rest finite and non-zero; rows * row_bytes / (element size) elements back to back (a row need not hold
 * whole elements). */
void wl_grad_fill_specials(uint8_t *out, int64_t rows, size_t row_bytes, sy_dtype_t dtype, uint64_t seed, int rank);

#ifdef __cplusplus
}
#endif

#endif
