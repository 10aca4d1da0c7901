/*
 * moe_ht.c — the MoE high-throughput inputs of workload.h: routing of every shape the tests name (uniform,
 * Zipf-skewed, one expert, empty ranks, experts with no rows), token rows and per-row values, exact (small
 * integers, weights of +-0.5, 1, 2: sums and products stay exact) or spread over magnitudes, and the given
 * E4M3 tokens with their scales. Every value is keyed by its place, so any rank regenerates any rank's.
 */
#include <stdlib.h>
#include <string.h>

#include "workload.h"

enum { KEY_TOKENS = 1, KEY_IDS = 2, KEY_TARGET = 3, KEY_ORDER = 4, KEY_ROW = 5, KEY_VALUE = 6, KEY_FP8 = 7 };

static uint64_t key(const wl_moe_ht_t *m, uint64_t what, uint64_t rank, uint64_t index) {
  return wl_mix(wl_mix(wl_mix(wl_mix(m->seed ^ 0x68745f6d6f65ull) ^ what) ^ rank) ^ index);
}

const char *wl_moe_ht_route_name(int route) {
  static const char *names[WL_HT_ROUTES] = {"uniform", "zipf", "one expert", "empty ranks", "sparse"};
  return route >= 0 && route < WL_HT_ROUTES ? names[route] : "?";
}

int wl_moe_ht_num_tokens(const wl_moe_ht_t *m, int rank) {
  if (m->route == WL_HT_EMPTY_RANKS && rank % 3 == (int)(m->seed % 2)) return 0;
  const uint64_t h = key(m, KEY_TOKENS, (uint64_t)rank, 0);
  return h % 3 == 0 ? m->max_tokens : (int)((h >> 8) % (uint64_t)(m->max_tokens + 1));
}

int64_t wl_moe_ht_target(const wl_moe_ht_t *m) {
  return (int64_t)(key(m, KEY_TARGET, 0, 0) % (uint64_t)m->num_experts);
}

/* The experts a route draws from, in its order: a seeded permutation (Zipf's hot ones first), and for
 * WL_HT_SPARSE only its first third. Returns how many. */
static int draw_order(const wl_moe_ht_t *m, int32_t *order) {
  const int E = m->num_experts;
  for (int i = 0; i < E; i++) order[i] = i;
  uint64_t state = key(m, KEY_ORDER, 0, 0);
  for (int i = E - 1; i > 0; i--) { /* Fisher-Yates */
    const int j = (int)(wl_rand(&state) % (uint64_t)(i + 1));
    const int32_t x = order[i];
    order[i] = order[j], order[j] = x;
  }
  return m->route == WL_HT_SPARSE ? (E + 2) / 3 : E;
}

/* An index into order[0..n): uniform, or by Zipf's law through the cumulative weights cdf[0..n). */
static int draw_index(const double *cdf, int n, uint64_t h) {
  if (!cdf) return (int)(h % (uint64_t)n);
  const double u = (double)(h >> 11) * 0x1p-53 * cdf[n - 1];
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (cdf[mid] > u) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

void wl_moe_ht_ids(const wl_moe_ht_t *m, int rank, int n, int32_t *ids) {
  const int K = m->top_k;
  int32_t *order = malloc((size_t)m->num_experts * sizeof *order);
  double *cdf = m->route == WL_HT_ZIPF ? malloc((size_t)m->num_experts * sizeof *cdf) : NULL;
  if (!order || (m->route == WL_HT_ZIPF && !cdf)) abort();
  const int pool = draw_order(m, order);
  for (int i = 0; cdf && i < pool; i++) cdf[i] = (i ? cdf[i - 1] : 0.0) + 1.0 / (double)(i + 1);
  const int64_t target = wl_moe_ht_target(m);
  for (int t = 0; t < n; t++) {
    int32_t *row = ids + (size_t)t * K;
    uint64_t h = key(m, KEY_IDS, (uint64_t)rank, (uint64_t)t);
    for (int k = 0; k < K; k++) row[k] = -1;
    if (m->route == WL_HT_ONE_EXPERT) {
      row[t % K] = (int32_t)target;
      continue;
    }
    for (int k = 0; k < K; k++) {
      if ((h = wl_mix(h)) % 8 == 0) continue; /* -1 */
      for (int tries = 0; tries < 64 && row[k] < 0; tries++) {
        const int32_t x = order[draw_index(cdf, pool, h = wl_mix(h))];
        int taken = 0;
        for (int j = 0; j < k; j++) taken |= row[j] == x;
        if (!taken) row[k] = x;
      }
    }
  }
  free(order);
  free(cdf);
}

/* bf16 of a small integer or of a float: its upper half (exact for the values drawn here). */
static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

void wl_moe_ht_row(const wl_moe_ht_t *m, int which, int rank, int64_t row, int exact, uint16_t *out) {
  uint64_t hg = 0;
  int base = 0;
  for (int i = 0; i < m->hidden; i++) {
    const uint64_t h = wl_mix(key(m, KEY_ROW + 16 * (uint64_t)which, (uint64_t)rank, (uint64_t)row) ^ (uint64_t)i);
    if (exact) {
      out[i] = bf16_of((float)((int)(h % 7) - 3));
      continue;
    }
    if (i % 128 == 0) {
      hg = wl_mix(h ^ 0x67726f7570ull);
      base = 100 + (int)((hg >> 8) % 50);
    }
    const uint16_t sign = (uint16_t)((h >> 63) << 15), mantissa = (uint16_t)((h >> 40) & 0x7Fu);
    const int exponent = h % 50 == 1 ? 0 : base - (int)((h >> 16) % 8);
    out[i] = h % 64 == 0 ? 0 : (uint16_t)(sign | (uint16_t)(exponent << 7) | (exponent ? mantissa : (mantissa | 1)));
  }
}

void wl_moe_ht_rows(const wl_moe_ht_t *m, int which, int rank, int64_t rows, int exact, uint16_t *out) {
  for (int64_t r = 0; r < rows; r++) wl_moe_ht_row(m, which, rank, r, exact, out + (size_t)r * m->hidden);
}

float wl_moe_ht_value(const wl_moe_ht_t *m, int which, int rank, int64_t index, int exact) {
  const uint64_t h = key(m, KEY_VALUE + 16 * (uint64_t)which, (uint64_t)rank, (uint64_t)index);
  if (exact) {
    static const float values[3] = {0.5f, 1.0f, 2.0f};
    return (h >> 63 ? -1.0f : 1.0f) * values[h % 3];
  }
  float v = (float)(int32_t)(uint32_t)(h >> 32) * 0x1p-31f;
  if (h % 7 == 0) v *= 0x1p-12f;
  return v;
}

void wl_moe_ht_values(const wl_moe_ht_t *m, int which, int rank, int64_t count, int exact, float *out) {
  for (int64_t i = 0; i < count; i++) out[i] = wl_moe_ht_value(m, which, rank, i, exact);
}

void wl_moe_ht_fp8(const wl_moe_ht_t *m, int which, int rank, int64_t rows, uint8_t *q, float *scales) {
  const int groups = m->hidden / 128;
  for (int64_t r = 0; r < rows; r++) {
    const uint64_t row_key = key(m, KEY_FP8 + 16 * (uint64_t)which, (uint64_t)rank, (uint64_t)r);
    for (int i = 0; i < m->hidden; i++) {
      const uint8_t b = (uint8_t)(wl_mix(row_key ^ (uint64_t)i) >> 24);
      q[(size_t)r * m->hidden + i] = (b & 0x7Fu) == 0x7Fu ? (uint8_t)(b - 1) : b; /* 0x7F, 0xFF: NaN */
    }
    for (int g = 0; g < groups; g++) {
      const uint64_t h = wl_mix(row_key ^ 0x5ca1e5ull ^ (uint64_t)g << 40);
      const uint32_t bits = (uint32_t)(117 + h % 21) << 23 | (uint32_t)((h >> 16) & 0x7FFFFFu);
      float s;
      memcpy(&s, &bits, sizeof s);
      scales[(size_t)r * groups + g] = s;
    }
  }
}
