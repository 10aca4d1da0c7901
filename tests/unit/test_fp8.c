/*
 * test_fp8.c — the FP8 wire's arithmetic (src/ref/fp8.h, fp8.c), which the MoE dispatch kernel inlines and
 * the host backend calls, against rules computed independently here:
 *  - E4M3 -> fp32: all 256 codes against ldexp (NaN codes give 0x7FFFFFFF, zeros keep their sign), and
 *    back to themselves.
 *  - fp32 -> E4M3: the 127 positive finite E4M3 values from ldexp, the midpoints between neighbours in
 *    double; a magnitude moves to the next code past each midpoint, at a tie only when the lower code is odd,
 *    and stops at 448 (0x7E; with saturation everything beyond is 448, so 464, the 448/480 tie, shows no
 *    step). Every float with |x| in [2^-12, 2^10] (184M, both signs, walking the midpoints in order), every
 *    subnormal float, a stride-997 sample of the rest (all +-0 or +-448 there), every NaN, named cases.
 *  - every bf16 bit pattern (the production input) against the same rule.
 *  - group scales: every positive finite bf16 amax and a sample of floats, both modes: amax / 448 equals
 *    the double quotient rounded to fp32 (double rounding is innocuous for division, 53 >= 2 * 24 + 2); ue8m0
 *    is the first power of two (from ldexp) at or above it, so for every bf16 amax 448 * scale is in
 *    [amax, 2 * amax); named values, 0, inf, NaN.
 *  - sy__fp8_quantize_token on seeded random tokens (hidden 128, 2048, 7168; groups of random magnitudes,
 *    all-zero, signed zeros, one huge element, all negative, bf16 subnormals, with a NaN, with an inf) and a
 *    strided scale layout: every byte and scale equals the element-wise rule recomputed here; dequantised
 *    values are within E4M3's rounding of x; untouched scale slots stay poisoned.
 *  - the kernels' quotient by the reciprocal (sy__fp8_div_recip) against IEEE division, by E4M3 code, on
 *    (bf16 amax, bf16 x) pairs: every x for a sample of amax, a sample of x for the rest; all with
 *    SY_TEST_FP8_ALL=1.
 */
#include "check.h"
#include "ref/fp8.h"
#include "workload.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the independent rule ------------------------------------------------------------------------------ */

/* The value of a finite E4M3 code: 1.m * 2^(e - 7), or m/8 * 2^-6 when e = 0. */
static double e4m3_value(uint32_t q) {
  const int sign = (q >> 7) & 1, e = (int)(q >> 3) & 0xF, m = (int)(q & 7);
  const double v = e ? ldexp((double)(8 + m), e - 10) : ldexp((double)m, -9);
  return sign ? -v : v;
}

enum { MAX_CODE = 0x7E };
static double mid[MAX_CODE]; /* mid[h]: halfway between positive codes h and h + 1 */

static void midpoints(void) {
  for (uint32_t h = 0; h < MAX_CODE; h++) mid[h] = (e4m3_value(h) + e4m3_value(h + 1)) / 2;
}

/* Whether magnitude x rounds past code h (to h + 1 or beyond). */
static int passes(double x, uint32_t h) { return x > mid[h] || (x == mid[h] && (h & 1)); }

/* The code of magnitude x given the code of a smaller one: walk past the midpoints x passes. */
static uint32_t advance(uint32_t h, double x) {
  while (h < MAX_CODE && passes(x, h)) h++;
  return h;
}

static uint32_t code_of(double x) { /* the same from zero, by bisection: the first h that x does not pass */
  uint32_t lo = 0, hi = MAX_CODE;
  while (lo < hi) {
    const uint32_t h = (lo + hi) / 2;
    if (passes(x, h)) lo = h + 1;
    else hi = h;
  }
  return lo;
}

static uint8_t ref_encode(float f) {
  if (isnan(f)) return 0x7F;
  return (uint8_t)((signbit(f) ? 0x80u : 0u) | code_of(fabs((double)f)));
}

/* amax / 448 rounded once to fp32 (through double: innocuous for a quotient of floats); 1 for amax 0. */
static float ref_scale(float amax) { return amax == 0.0f ? 1.0f : (float)((double)amax / 448.0); }

/* The first power of two (-149 .. 127) at or above s >= 0; s itself when it is inf or NaN. */
static float ref_pow2_at_least(float s) {
  if (!(s <= 3.4e38f)) return s;
  for (int k = -149; k <= 127; k++) {
    if (ldexp(1.0, k) >= (double)s) return (float)ldexp(1.0, k);
  }
  return INFINITY;
}

/* ---- E4M3 -> fp32 ------------------------------------------------------------------------------------ */

static void decode_all_codes(void) {
  int bad = 0;
  for (uint32_t q = 0; q < 256; q++) {
    const float f = sy__fp8_e4m3_to_float((uint8_t)q);
    const int nan_code = (q & 0x7F) == 0x7F;
    const int ok = nan_code ? check_float_bits(f) == 0x7FFFFFFFu
                            : (double)f == e4m3_value(q) && (check_float_bits(f) >> 31) == (q >> 7);
    const uint8_t back = sy__fp8_e4m3_from_float(f);
    if ((!ok || back != (nan_code ? 0x7F : q)) && bad++ < 5)
      fprintf(stderr, "e4m3 0x%02x decodes to 0x%08x, encodes back to 0x%02x\n", q, check_float_bits(f), back);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(check_float_bits(sy__fp8_e4m3_to_float(0x00)), 0x00000000u);
  CHECK_EQ_INT(check_float_bits(sy__fp8_e4m3_to_float(0x80)), 0x80000000u);
  CHECK_EQ_INT(check_float_bits(sy__fp8_e4m3_to_float(0x7F)), 0x7FFFFFFFu);
  CHECK_EQ_INT(check_float_bits(sy__fp8_e4m3_to_float(0xFF)), 0x7FFFFFFFu);
  CHECK(sy__fp8_e4m3_to_float(0x7E) == 448.0f);
  CHECK(sy__fp8_e4m3_to_float(0xFE) == -448.0f);
  CHECK(sy__fp8_e4m3_to_float(0x01) == ldexpf(1.0f, -9));
  CHECK(sy__fp8_e4m3_to_float(0x07) == ldexpf(7.0f, -9));
  CHECK(sy__fp8_e4m3_to_float(0x08) == ldexpf(1.0f, -6));
  CHECK(sy__fp8_e4m3_to_float(0x38) == 1.0f);
}

/* ---- fp32 -> E4M3 ------------------------------------------------------------------------------------ */

typedef struct range {
  uint32_t first, last, stride; /* magnitudes first, first + stride, ... below last */
  long long checked, bad;
} range_t;

/* Each magnitude and its negative. Stride 1 walks the midpoints; others find the code by bisection. */
static void *check_range(void *arg) {
  range_t *r = arg;
  uint32_t h = code_of((double)check_bits_float(r->first));
  for (uint32_t u = r->first; u < r->last; u += r->stride) {
    const float f = check_bits_float(u);
    h = r->stride == 1 ? advance(h, (double)f) : code_of((double)f);
    const uint8_t p = sy__fp8_e4m3_from_float(f), n = sy__fp8_e4m3_from_float(-f);
    if ((p != h || n != (0x80u | h)) && r->bad++ < 5)
      fprintf(stderr, "float 0x%08x: e4m3 0x%02x, of its negative 0x%02x, want 0x%02x\n", u, p, n, h);
    r->checked++;
    if (u > UINT32_MAX - r->stride) break;
  }
  return NULL;
}

static void every_float_in_range(void) {
  /* Dense: |x| in [2^-12, 2^10] split in two halves, side by side; every subnormal float. Sampled: the
   * rest up to infinity (included, as the last magnitude, 0x7F800000). */
  /* clang-format off */
  range_t ranges[] = {
      {0x39800000u, 0x3F000000u, 1, 0, 0}, {0x3F000000u, 0x44800001u, 1, 0, 0}, {0x00000000u, 0x00800000u, 1, 0, 0},
      {0x00800000u, 0x39800000u, 997, 0, 0}, {0x44800001u, 0x7F800000u, 997, 0, 0}, {0x7F800000u, 0x7F800001u, 1, 0, 0},
  };
  /* clang-format on */
  const int n = (int)(sizeof ranges / sizeof ranges[0]);
  pthread_t thread;
  const int threaded = pthread_create(&thread, NULL, check_range, &ranges[0]) == 0;
  for (int i = threaded ? 1 : 0; i < n; i++) check_range(&ranges[i]);
  if (threaded) pthread_join(thread, NULL);
  long long checked = 0, bad = 0;
  for (int i = 0; i < n; i++) checked += ranges[i].checked, bad += ranges[i].bad;
  CHECK_EQ_INT(bad, 0);
  CHECK(ranges[0].checked + ranges[1].checked == 22ll * (1 << 23) + 1);
  printf("floats checked: %lld (and their negatives)\n", checked);

  long long bad_nan = 0; /* every NaN, both signs */
  for (uint32_t u = 0x7F800001u; u != 0x80000000u; u++)
    bad_nan += sy__fp8_e4m3_from_float(check_bits_float(u)) != 0x7F ||
               sy__fp8_e4m3_from_float(check_bits_float(u | 0x80000000u)) != 0x7F;
  CHECK_EQ_INT(bad_nan, 0);
}

/* Every bf16 pattern, the dispatch's input: decode exactly (bits << 16) and encode. */
static void every_bf16(void) {
  int bad = 0;
  for (uint32_t b = 0; b < 65536; b++) {
    const float f = check_bits_float(b << 16);
    const uint8_t got = sy__fp8_e4m3_from_float(f), want = ref_encode(f);
    if (got != want && bad++ < 5) fprintf(stderr, "bf16 0x%04x: e4m3 0x%02x, want 0x%02x\n", b, got, want);
  }
  CHECK_EQ_INT(bad, 0);
}

/* A few named cases, so a failure reads plainly. */
static void named_cases(void) {
  /* clang-format off */
  static const struct {
    float x;
    unsigned want;
  } cases[] = {
      {0.0f, 0x00}, {-0.0f, 0x80}, {1.0f, 0x38}, {-1.0f, 0xB8}, {1.0625f, 0x38} /* tie, even below */,
      {1.1875f, 0x3A} /* tie, even above */, {1.0625001f, 0x39}, {240.0f, 0x77}, {416.0f, 0x7D},
      {432.0f, 0x7E} /* tie 416/448, 448 even */, {431.99997f, 0x7D}, {448.0f, 0x7E}, {-448.0f, 0xFE},
      {456.0f, 0x7E}, {463.99997f, 0x7E}, {464.0f, 0x7E} /* tie 448/480, 448 even */, {464.00003f, 0x7E},
      {480.0f, 0x7E}, {-480.0f, 0xFE}, {1e30f, 0x7E}, {3.4028235e38f, 0x7E}, {-3.4028235e38f, 0xFE},
      {INFINITY, 0x7E}, {-INFINITY, 0xFE}, {0x1p-6f, 0x08} /* smallest normal */, {0x1p-9f, 0x01},
      {-0x1p-9f, 0x81}, {0x1p-10f, 0x00} /* tie with the smallest subnormal: even zero */, {-0x1p-10f, 0x80},
      {0x1.000002p-10f, 0x01}, {0x1.fffffep-11f, 0x00}, {0x3p-10f, 0x02} /* tie 1/2 */, {0x5p-10f, 0x02},
      {0x7p-10f, 0x04} /* tie 3/4 */, {0xfp-10f, 0x08} /* tie 7/8: up into the normals */, {0x1p-126f, 0x00},
      {-0x1p-149f, 0x80}, {0x1.fffffep-7f, 0x08}, {0x1.1p-6f, 0x08} /* tie, even below, smallest binade */,
      {0x1.3p-6f, 0x0A}, {0.3f, 0x2A} /* 0.3 = 1.2 * 2^-2 -> 1.25 */, {-17.0f, 0xD8} /* tie 16/18: 16 */,
  };
  /* clang-format on */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const uint8_t got = sy__fp8_e4m3_from_float(cases[i].x);
    if (got != cases[i].want) fprintf(stderr, "case %zu: %a gives 0x%02x\n", i, (double)cases[i].x, got);
    CHECK_EQ_INT(got, cases[i].want);
    CHECK_EQ_INT(ref_encode(cases[i].x), cases[i].want); /* the reference agrees with the hand-made answers */
  }
  CHECK_EQ_INT(sy__fp8_e4m3_from_float(check_bits_float(0x7FC00000u)), 0x7F);
  CHECK_EQ_INT(sy__fp8_e4m3_from_float(check_bits_float(0xFFC00000u)), 0x7F);
  CHECK_EQ_INT(sy__fp8_e4m3_from_float(check_bits_float(0x7F800001u)), 0x7F);
  CHECK_EQ_INT(sy__fp8_e4m3_from_float(check_bits_float(0x80000001u)), 0x80);
  CHECK_EQ_INT(sy__fp8_e4m3_from_float(check_bits_float(0x00000001u)), 0x00);
}

/* ---- group scales ------------------------------------------------------------------------------------- */

static int is_pow2(float s) {
  const uint32_t u = check_float_bits(s), e = u >> 23, m = u & 0x7FFFFFu;
  return e == 0 ? m != 0 && (m & (m - 1)) == 0 : e < 0xFF && m == 0;
}

/* One positive amax in both modes; `bf16_domain`: also 448 * ue8m0 scale >= amax (exact in double). */
static int check_scale(float amax, int bf16_domain) {
  const float plain = sy__fp8_group_scale(amax, 0), ue8m0 = sy__fp8_group_scale(amax, 1);
  const float want = ref_scale(amax);
  int ok = check_float_bits(plain) == check_float_bits(want) &&
           check_float_bits(ue8m0) == check_float_bits(ref_pow2_at_least(want));
  ok = ok && is_pow2(ue8m0) && ue8m0 >= plain && (double)ue8m0 * 448.0 < 2.0 * (double)amax;
  if (bf16_domain) ok = ok && (double)ue8m0 * 448.0 >= (double)amax;
  if (!ok)
    fprintf(stderr, "amax %a: scale %a, ue8m0 %a (want %a)\n", (double)amax, (double)plain, (double)ue8m0,
            (double)want);
  return ok;
}

static void scales(void) {
  /* clang-format off */
  static const struct {
    float amax, plain, ue8m0;
  } cases[] = {
      {0.0f, 1.0f, 1.0f},       {-0.0f, 1.0f, 1.0f},        {448.0f, 1.0f, 1.0f},          {449.0f, 449.0f / 448.0f, 2.0f},
      {447.0f, 447.0f / 448.0f, 1.0f}, {1.0f, 1.0f / 448.0f, 0x1p-8f}, {224.0f, 0.5f, 0.5f}, {896.0f, 2.0f, 2.0f},
      {0x1.c0p+8f * 0x1p-20f, 0x1p-20f, 0x1p-20f} /* 448 * 2^-20 */,
      {0x1.c00002p-12f, 0x1.000002p-20f, 0x1p-19f} /* just above 448 * 2^-20 */,
      {0x1.bffffep-12f, 0x1.fffffep-21f, 0x1p-20f} /* just below */,
      {0x1p-133f, 0x1p-133f / 448.0f, 0x1p-141f} /* the smallest bf16 subnormal: a subnormal scale */,
      {0x1p-126f, 0x1p-126f / 448.0f, 0x1p-134f}, {0x1.c0p+8f * 0x1p-140f, 0x1p-140f, 0x1p-140f},
      {0x1.fep+127f, 0x1.fep+127f / 448.0f, 0x1p+120f} /* the largest bf16 */,
      {0x1p-149f, 0.0f, 0x1p-149f} /* not a bf16: the quotient rounds to 0 */,
  };
  /* clang-format on */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const float plain = sy__fp8_group_scale(cases[i].amax, 0), ue8m0 = sy__fp8_group_scale(cases[i].amax, 1);
    if (check_float_bits(plain) != check_float_bits(cases[i].plain) ||
        check_float_bits(ue8m0) != check_float_bits(cases[i].ue8m0))
      fprintf(stderr, "scale case %zu: amax %a gives %a, ue8m0 %a\n", i, (double)cases[i].amax, (double)plain,
              (double)ue8m0);
    CHECK_EQ_INT(check_float_bits(plain), check_float_bits(cases[i].plain));
    CHECK_EQ_INT(check_float_bits(ue8m0), check_float_bits(cases[i].ue8m0));
  }
  CHECK(isnan(sy__fp8_group_scale(NAN, 0)) && isnan(sy__fp8_group_scale(NAN, 1)));
  CHECK(sy__fp8_group_scale(INFINITY, 0) == INFINITY && sy__fp8_group_scale(INFINITY, 1) == INFINITY);

  int bad = 0;
  for (uint32_t b = 1; b < 0x7F80u; b++) bad += !check_scale(check_bits_float(b << 16), 1); /* every positive bf16 */
  CHECK_EQ_INT(bad, 0);
  bad = 0; /* floats: every 9973rd from 224 * 2^-149 (where the quotient stops rounding to 0) */
  for (uint32_t u = 0xE1u; u < 0x7F800000u; u += 9973u) bad += !check_scale(check_bits_float(u), 0);
  CHECK_EQ_INT(bad, 0);
}

/* ---- quantize_token ----------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x5eed0f8ull;

static uint32_t rnd(void) { return (uint32_t)(wl_rand(&rng_state) >> 32); } /* splitmix64's upper half */

/* A bf16 of biased exponent in [lo, hi] (1 .. 254), random sign and mantissa. */
static uint16_t rnd_bf16(int lo, int hi, int negative) {
  const uint32_t e = (uint32_t)lo + rnd() % (uint32_t)(hi - lo + 1);
  const uint32_t sign = negative < 0 ? (rnd() & 1u) : (uint32_t)negative;
  return (uint16_t)(sign << 15 | e << 7 | (rnd() & 0x7Fu));
}

enum { GROUP = 128, KINDS = 9 };
enum { RANDOM, ZEROS, SIGNED_ZEROS, HUGE_ONE, NEGATIVE, SUBNORMALS, WITH_NAN, WITH_INF, WIDE };

static void fill_group(uint16_t *x, int kind) {
  const int base = 60 + (int)(rnd() % 130); /* the group's magnitude: 2^-67 .. 2^62 */
  for (int i = 0; i < GROUP; i++) {
    switch (kind) {
      case ZEROS: x[i] = 0; break;
      case SIGNED_ZEROS: x[i] = (uint16_t)((rnd() & 1u) << 15); break;
      case NEGATIVE: x[i] = rnd_bf16(base - 10, base, 1); break;
      case SUBNORMALS: x[i] = (uint16_t)((rnd() & 0x807Fu)); break;
      case WIDE: x[i] = rnd_bf16(1, 254, -1); break;
      default: x[i] = rnd_bf16(base - 10, base, -1); break;
    }
  }
  const int at = (int)(rnd() % GROUP);
  if (kind == HUGE_ONE) x[at] = (rnd() & 1u) ? 0x7F7Fu : rnd_bf16(200, 254, -1);
  if (kind == WITH_NAN) x[at] = (uint16_t)((rnd() & 0x8000u) | 0x7FC0u | (rnd() & 0x3Fu));
  if (kind == WITH_INF) x[at] = (rnd() & 1u) ? 0x7F80u : 0xFF80u;
}

typedef struct tally {
  long long groups[KINDS], bad_q, bad_scale, bad_bound, bad_zero, bad_poison;
} tally_t;

static void check_token(int hidden, int ue8m0, const uint16_t *x, const int *kinds, tally_t *t) {
  enum { STRIDE = 3 }; /* group-major, slot-minor: the receive layout's scales[g * S + slot] */
  const int groups = hidden / GROUP;
  static uint8_t q[7168];
  static float scales[7168 / GROUP * STRIDE];
  const uint32_t poison = 0x7FBADBADu;
  memset(q, 0xA5, sizeof q);
  for (int i = 0; i < groups * STRIDE; i++) scales[i] = check_bits_float(poison);
  sy__fp8_quantize_token(x, hidden, ue8m0, q, scales, STRIDE);
  for (int g = 0; g < groups; g++) {
    t->groups[kinds[g]]++;
    for (int s = 1; s < STRIDE; s++) t->bad_poison += check_float_bits(scales[g * STRIDE + s]) != poison;
    float amax = 0.0f; /* the largest magnitude; NaN never compares larger */
    for (int i = 0; i < GROUP; i++) {
      const float a = fabsf(check_bits_float((uint32_t)x[g * GROUP + i] << 16));
      if (a > amax) amax = a;
    }
    float scale = ref_scale(amax);
    if (ue8m0) scale = ref_pow2_at_least(scale);
    if (check_float_bits(scales[g * STRIDE]) != check_float_bits(scale) && t->bad_scale++ < 5)
      fprintf(stderr, "hidden %d ue8m0 %d group %d (kind %d): scale %a, want %a\n", hidden, ue8m0, g, kinds[g],
              (double)scales[g * STRIDE], (double)scale);
    for (int i = 0; i < GROUP; i++) {
      const float xf = check_bits_float((uint32_t)x[g * GROUP + i] << 16);
      const uint8_t got = q[g * GROUP + i], want = ref_encode((float)((double)xf / (double)scale));
      if (got != want && t->bad_q++ < 5)
        fprintf(stderr, "hidden %d ue8m0 %d group %d (kind %d) element %d: x %a gives 0x%02x, want 0x%02x\n", hidden,
                ue8m0, g, kinds[g], i, (double)xf, got, want);
      if (kinds[g] == ZEROS || kinds[g] == SIGNED_ZEROS)
        t->bad_zero += got != (signbit(xf) ? 0x80 : 0x00) || scale != 1.0f;
      if (isfinite(xf) && isfinite(scale)) { /* |q * scale - x| <= half an E4M3 ulp, scaled, and a little */
        const double err = fabs((double)sy__fp8_e4m3_to_float(got) * scale - (double)xf);
        const double bound = (fabs((double)xf) * 0x1p-4 + 0x1p-10 * scale) * (1 + 0x1p-20);
        if (!(err <= bound) && t->bad_bound++ < 5)
          fprintf(stderr, "x %a scale %a: dequantised off by %a, bound %a\n", (double)xf, (double)scale, err, bound);
      }
    }
  }
}

static void quantize_tokens(void) {
  static const int hiddens[] = {128, 2048, 7168};
  static uint16_t x[7168];
  int kinds[7168 / GROUP];
  tally_t t;
  memset(&t, 0, sizeof t);
  for (size_t h = 0; h < sizeof hiddens / sizeof hiddens[0]; h++) {
    const int hidden = hiddens[h], groups = hidden / GROUP;
    for (int token = 0; token < 24; token++) {
      for (int g = 0; g < groups; g++) {
        /* Every kind early (the 128-wide tokens have one group each), then mostly random groups. */
        kinds[g] = token < KINDS && g == 0 ? token : (rnd() % 3 == 0 ? (int)(rnd() % KINDS) : RANDOM);
        fill_group(x + g * GROUP, kinds[g]);
      }
      check_token(hidden, token & 1, x, kinds, &t);
      check_token(hidden, !(token & 1), x, kinds, &t);
    }
  }
  CHECK_EQ_INT(t.bad_q, 0);
  CHECK_EQ_INT(t.bad_scale, 0);
  CHECK_EQ_INT(t.bad_bound, 0);
  CHECK_EQ_INT(t.bad_zero, 0);
  CHECK_EQ_INT(t.bad_poison, 0);
  for (int k = 0; k < KINDS; k++) CHECK(t.groups[k] >= 6);

  /* Spelled out: an all-zero group, a NaN and an inf each in an otherwise ordinary group. */
  uint16_t in[2 * GROUP];
  uint8_t q[2 * GROUP];
  float sc[2];
  for (int i = 0; i < 2 * GROUP; i++) in[i] = 0x3F80; /* 1.0 */
  for (int i = 0; i < GROUP; i++) in[i] = 0;
  in[GROUP + 5] = 0x43E0; /* 448 */
  in[GROUP + 7] = 0xFFC1; /* a NaN */
  sy__fp8_quantize_token(in, 2 * GROUP, 0, q, sc, 1);
  CHECK(sc[0] == 1.0f && q[0] == 0 && q[GROUP - 1] == 0);
  CHECK(sc[1] == 1.0f && q[GROUP] == 0x38 && q[GROUP + 5] == 0x7E && q[GROUP + 7] == 0x7F);
  in[GROUP + 7] = 0xFF80; /* -inf: the scale becomes inf, finite values 0 */
  sy__fp8_quantize_token(in, 2 * GROUP, 1, q, sc, 1);
  CHECK(sc[1] == INFINITY && q[GROUP] == 0x00 && q[GROUP + 5] == 0x00 && q[GROUP + 7] == 0x7F);
}

/* ---- the kernels' quotient by the reciprocal ------------------------------------------------------------ */

/* sy__fp8_div_recip (the kernels' x / scale) gives the E4M3 code of the IEEE quotient for every bf16 x of either
 * sign under the scale of every bf16 amax >= |x| that sy__fp8_recip_ok accepts, both modes: every x for every 31st
 * amax and the top ones, a stride-61 sample of x (and x = amax) for the rest; every pair with SY_TEST_FP8_ALL=1
 * (2,090,062,078 pairs, ~20 s; test_gpu_fp8 checks them all on the GPU). */
static long long recip_pairs(uint32_t a, int ue8m0, uint32_t stride, long long *bad) {
  const float amax = check_bits_float(a << 16), s = sy__fp8_scale(amax, ue8m0), r = 1.0f / s;
  long long n = 0;
  for (uint32_t x16 = 0; x16 <= a; x16 = x16 + stride > a && x16 != a ? a : x16 + stride)
    for (uint32_t sign = 0; sign < 2; sign++, n++) {
      const float x = check_bits_float((x16 | sign << 15) << 16);
      const uint8_t want = sy__fp8_e4m3_encode(x / s), got = sy__fp8_e4m3_encode(sy__fp8_div_recip(x, s, r));
      if (want != got && (*bad)++ < 5)
        fprintf(stderr, "amax bf16 0x%04x (ue8m0 %d), x bf16 0x%04x: by the reciprocal 0x%02x, IEEE 0x%02x\n", a, ue8m0,
                x16 | sign << 15, got, want);
    }
  return n;
}

static void quotients_by_reciprocal(void) {
  const char *all = getenv("SY_TEST_FP8_ALL");
  const int every = all && all[0] == '1';
  long long pairs = 0, bad = 0, below = 0;
  for (int ue8m0 = 0; ue8m0 < 2; ue8m0++)
    for (uint32_t a = 1; a < 0x7F80u; a++) { /* every positive finite bf16 amax */
      const float s = sy__fp8_scale(check_bits_float(a << 16), ue8m0);
      if (!sy__fp8_recip_ok(s)) { /* only the smallest amax: their scales are below 2^-100 */
        CHECK(s < SY_FP8_RECIP_MIN);
        below++;
        continue;
      }
      pairs += recip_pairs(a, ue8m0, every || a % 31 == 0 || a > 0x7F70u ? 1 : 61, &bad);
    }
  CHECK_EQ_INT(bad, 0);
  CHECK(below > 0 && below < 2 * 0x1800); /* bf16 amax below 448 x 2^-100 ~ 2^-91: exponents under 36 */
  printf("quotients by the reciprocal: %lld (amax, x) pairs, E4M3 codes equal%s\n", pairs, every ? " (all)" : "");
  /* what the sign fix is for: -0 / s is -0, while q0 + residual x r rounds -0 + +0 to +0 */
  const float s = sy__fp8_scale(1.0f, 0), r = 1.0f / s;
  CHECK(signbit(sy__fp8_div_recip(-0.0f, s, r)) && sy__fp8_e4m3_encode(sy__fp8_div_recip(-0.0f, s, r)) == 0x80);
  CHECK(sy__fp8_e4m3_encode(sy__fp8_div_recip(NAN, s, r)) == 0x7F);
  CHECK(sy__fp8_recip_ok(SY_FP8_RECIP_MIN) && !sy__fp8_recip_ok(SY_FP8_RECIP_MIN / 2) && !sy__fp8_recip_ok(INFINITY) &&
        !sy__fp8_recip_ok(NAN) && sy__fp8_recip_ok(0x1p127f));
}

int main(void) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  midpoints();
  named_cases();
  decode_all_codes();
  every_bf16();
  scales();
  quantize_tokens();
  every_float_in_range();
  quotients_by_reciprocal();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("fp8 checked in %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  return check_report();
}
