/*
 * moe.c — the MoE inputs of workload.h: the tests' seeded cases (routing of every shape a case names, tokens
 * with a magnitude per FP8 group, weights, expert outputs), each value keyed so that any rank regenerates any
 * rank's; and sy-bench's uniform routing and tokens, one stream per rank and size.
 */
#include <string.h>

#include "workload.h"

/* ---- seeded cases -------------------------------------------------------------------------------------------- */

uint64_t wl_moe_key(uint64_t seed, uint64_t salt, uint64_t what, uint64_t round, uint64_t rank) {
  return wl_mix(wl_mix(wl_mix(wl_mix(seed ^ salt) ^ what) ^ round) ^ rank);
}

static uint64_t key(const wl_moe_t *m, uint64_t what, uint64_t round, uint64_t rank) {
  return wl_moe_key(m->seed, m->salt, what, round, rank);
}

wl_route_t wl_moe_route(const wl_moe_t *m, int round) {
  static const wl_route_t mixed[5] = {WL_ROUTE_RANDOM, WL_ROUTE_ONE_EXPERT, WL_ROUTE_SAME_RANK, WL_ROUTE_RANDOM,
                                      WL_ROUTE_NONE};
  return m->route == WL_ROUTE_MIXED ? mixed[round % 5] : m->route;
}

int64_t wl_moe_target(const wl_moe_t *m, int round) {
  return (int64_t)(key(m, 2, (uint64_t)round, 0) % (uint64_t)m->num_experts);
}

int wl_moe_num_tokens(const wl_moe_t *m, int round, int rank) {
  if (m->route == WL_ROUTE_FULL || m->route == WL_ROUTE_MIXED) return m->max_tokens;
  if (m->route == WL_ROUTE_EMPTY_RANK && rank == round % m->world) return 0;
  const uint64_t h = key(m, 1, (uint64_t)round, (uint64_t)rank);
  return h % 3 == 0 ? m->max_tokens : (int)((h >> 8) % (uint64_t)(m->max_tokens + 1));
}

/* A random expert not yet in ids[0..top_k) (on rank `on_rank`, or any when -1), or -1 when 64 tries find none. */
static int64_t pick_expert(const wl_moe_t *m, const int64_t *ids, uint64_t *h, int on_rank) {
  const int L = m->num_experts / m->world;
  for (int tries = 0; tries < 64; tries++) {
    *h = wl_mix(*h);
    const int64_t x =
        on_rank < 0 ? (int64_t)(*h % (uint64_t)m->num_experts) : (int64_t)on_rank * L + (int64_t)(*h % (uint64_t)L);
    int taken = 0;
    for (int k = 0; k < m->top_k; k++) taken |= ids[k] == x;
    if (!taken) return x;
  }
  return -1;
}

/* The CPU tests' draw. Differs from the GPU's in the token's key (rank * 100000 + t), in which bits decide a -1
 * and a one-expert token's extra experts, in the same-rank count's clamp (to top_k, else to the rank's experts),
 * and in drawing the same-rank skip before the -1. */
static void ids_unit_draw(const wl_moe_t *m, int round, int rank, int n, int64_t *ids) {
  const wl_route_t route = wl_moe_route(m, round);
  const int K = m->top_k, W = m->world, L = m->num_experts / W;
  const int64_t target = wl_moe_target(m, round);
  for (int t = 0; t < n; t++) {
    int64_t *row = ids + (size_t)t * K;
    uint64_t h = key(m, 3, (uint64_t)round, (uint64_t)rank * 100000 + (uint64_t)t);
    for (int k = 0; k < K; k++) row[k] = -1;
    if (route == WL_ROUTE_NONE) continue;
    if (route == WL_ROUTE_ONE_EXPERT) row[(h >> 20) % (uint64_t)K] = target;
    if (route == WL_ROUTE_SAME_RANK) { /* 2.. of its experts on rank d, at random k */
      const int d = (int)((h >> 12) % (uint64_t)W);
      int want = 2 + (int)((h >> 24) % (uint64_t)K);
      want = want > K ? K : want > L ? L : want;
      for (int i = 0; i < want; i++) {
        int k;
        do k = (int)((h = wl_mix(h)) % (uint64_t)K);
        while (row[k] != -1);
        row[k] = pick_expert(m, row, &h, d);
      }
    }
    for (int k = 0; k < K; k++) {
      if (row[k] != -1 || (route == WL_ROUTE_SAME_RANK && (h = wl_mix(h)) % 2)) continue;
      if ((h = wl_mix(h)) % 8 == 0) continue; /* -1 */
      if (route == WL_ROUTE_ONE_EXPERT && h % 3 == 0) continue;
      row[k] = pick_expert(m, row, &h, -1);
    }
  }
}

/* The GPU tests' draw: also one token in sixteen with no expert at all (random routes). */
static void ids_gpu_draw(const wl_moe_t *m, int round, int rank, int n, int64_t *ids) {
  const wl_route_t route = wl_moe_route(m, round);
  const int K = m->top_k, W = m->world, L = m->num_experts / W;
  const int64_t target = wl_moe_target(m, round);
  for (int t = 0; t < n; t++) {
    int64_t *row = ids + (size_t)t * K;
    uint64_t h = key(m, 3, (uint64_t)round, (uint64_t)rank << 32 | (uint64_t)t);
    for (int k = 0; k < K; k++) row[k] = -1;
    if (route == WL_ROUTE_NONE) continue;
    if (route != WL_ROUTE_ONE_EXPERT && route != WL_ROUTE_SAME_RANK && h % 16 == 5) continue; /* no expert */
    if (route == WL_ROUTE_ONE_EXPERT) row[(h >> 20) % (uint64_t)K] = target;
    if (route == WL_ROUTE_SAME_RANK) {
      const int d = (int)((h >> 12) % (uint64_t)W);
      int want = 2 + (int)((h >> 24) % (uint64_t)K);
      want = want > K ? K : want;
      want = want > L ? L : want;
      for (int i = 0; i < want; i++) {
        int k;
        do k = (int)((h = wl_mix(h)) % (uint64_t)K);
        while (row[k] != -1);
        row[k] = pick_expert(m, row, &h, d);
      }
    }
    for (int k = 0; k < K; k++) {
      if (row[k] != -1) continue;
      h = wl_mix(h);
      if (route == WL_ROUTE_SAME_RANK && h % 2) continue;
      if ((h >> 8) % 8 == 0) continue; /* -1 */
      if (route == WL_ROUTE_ONE_EXPERT && (h >> 16) % 3 == 0) continue;
      row[k] = pick_expert(m, row, &h, -1);
    }
  }
}

void wl_moe_ids(const wl_moe_t *m, int round, int rank, int n, int64_t *ids) {
  if (m->draw == WL_DRAW_GPU) ids_gpu_draw(m, round, rank, n, ids);
  else ids_unit_draw(m, round, rank, n, ids);
}

/* A bf16 of random sign and mantissa with the fp32-biased exponent `exponent` (0: subnormal, never zero). */
static uint16_t bf16_bits(uint64_t h, int exponent) {
  const uint16_t sign = (uint16_t)((h >> 63) << 15), mantissa = (uint16_t)((h >> 40) & 0x7Fu);
  return (uint16_t)(sign | (uint16_t)(exponent << 7) | (exponent == 0 ? (mantissa | 1) : mantissa));
}

/* With m->specials, one element in `rate`: NaN, -inf, +inf, -0.0 or a subnormal. */
static int special_bits(const wl_moe_t *m, uint64_t h, uint64_t rate, uint16_t *out) {
  if (!m->specials || (h >> 3) % rate) return 0;
  static const uint16_t values[5] = {0x7FC1, 0xFF80, 0x7F80, 0x8000, 0x0003};
  *out = values[(h >> 48) % 5];
  return 1;
}

void wl_moe_tokens(const wl_moe_t *m, int round, int rank, int n, uint16_t *tokens) {
  const int H = m->hidden;
  for (int t = 0; t < n; t++) {
    uint64_t hg = 0;
    int zero_group = 0, base = 0;
    for (int i = 0; i < H; i++) {
      if (i % 128 == 0) {
        hg = key(m, 4, (uint64_t)round, (uint64_t)rank << 40 ^ (uint64_t)t << 20 ^ (uint64_t)(i / 128));
        zero_group = hg % 16 == 0;
        base = 100 + (int)((hg >> 8) % 50);
      }
      const uint64_t h = wl_mix(hg ^ (uint64_t)i << 32);
      uint16_t v;
      if (special_bits(m, h, 301, &v)) tokens[(size_t)t * H + i] = v;
      else if (zero_group || h % 64 == 0) tokens[(size_t)t * H + i] = 0;
      else tokens[(size_t)t * H + i] = bf16_bits(h, h % 50 == 1 ? 0 : base - (int)((h >> 16) % 8));
    }
  }
}

void wl_moe_weights(const wl_moe_t *m, int round, int rank, int n, int which, float *weights) {
  for (size_t i = 0; i < (size_t)n * m->top_k; i++) {
    const uint64_t h = key(m, 5 + (uint64_t)which, (uint64_t)round, (uint64_t)rank << 32 ^ i);
    float v = (float)(int32_t)(uint32_t)(h >> 32) * 0x1p-31f;
    if (h % 7 == 0) v *= 0x1p-12f;
    weights[i] = v;
  }
}

static uint64_t expert_key(const wl_moe_t *m, int round, int rank, int expert, int slot) {
  return key(m, 7, (uint64_t)round, (uint64_t)rank << 48 ^ (uint64_t)expert << 36 ^ (uint64_t)slot << 16);
}

static uint16_t expert_elem(const wl_moe_t *m, uint64_t row_key, int h) {
  const uint64_t x = wl_mix(row_key ^ (uint64_t)h);
  uint16_t v;
  return special_bits(m, x, 997, &v) ? v : bf16_bits(x, 110 + (int)((x >> 8) % 30));
}

uint16_t wl_moe_expert_out(const wl_moe_t *m, int round, int rank, int expert, int slot, int h) {
  return expert_elem(m, expert_key(m, round, rank, expert, slot), h);
}

void wl_moe_expert_row(const wl_moe_t *m, int round, int rank, int expert, int slot, uint16_t *row) {
  const uint64_t row_key = expert_key(m, round, rank, expert, slot);
  for (int h = 0; h < m->hidden; h++) row[h] = expert_elem(m, row_key, h);
}

/* ---- uniform inputs (sy-bench) ------------------------------------------------------------------------------- */

static uint64_t uniform_seed(int rank, int64_t tokens, uint64_t what) {
  return 0x6D6F452D6C6C0000ull ^ (what << 56) ^ ((uint64_t)tokens << 24) ^ ((uint64_t)rank * 0xD1B54A32D192ED03ull);
}

void wl_moe_uniform_routing(int rank, int tokens, int num_experts, int top_k, int32_t *ids, float *weights) {
  wl_moe_range_routing(rank, tokens, 0, num_experts, top_k, ids, weights);
}

void wl_moe_keep_experts(int32_t *ids, size_t n, int L, int e0, int ne) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= 0 && (ids[i] % L < e0 || ids[i] % L >= e0 + ne)) ids[i] = -1;
}

void wl_moe_range_routing(int rank, int tokens, int first, int candidates, int top_k, int32_t *ids, float *weights) {
  uint64_t s = uniform_seed(rank, tokens, 1);
  for (int t = 0; t < tokens; t++) {
    int32_t *row = ids + (size_t)t * top_k;
    for (int k = 0; k < top_k; k++) {
      int taken;
      do {
        row[k] = (int32_t)(first + (int64_t)(wl_rand(&s) % (uint64_t)candidates));
        taken = 0;
        for (int j = 0; j < k; j++) taken |= row[j] == row[k];
      } while (taken);
      const float w = (float)((wl_rand(&s) >> 40) + 1) / 16777216.0f;
      if (weights) weights[(size_t)t * top_k + k] = w;
    }
  }
}

void wl_moe_uniform_tokens(int rank, int tokens, int hidden, uint16_t *x) {
  uint64_t s = uniform_seed(rank, tokens, 2);
  for (size_t i = 0; i < (size_t)tokens * hidden; i++) {
    const uint64_t r = wl_rand(&s);
    float f = ((float)(r >> 40) / 16777216.0f - 0.5f) * 8.0f;
    if (f == 0.0f) f = 0.5f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    x[i] = (uint16_t)(bits >> 16); /* the float's upper half */
  }
}
