/*
 * test_bf16.c — the element conversions of src/ref/attn_ref.h (the KV backward rounds with them; the CUDA
 * kernels use __float2bfloat16_rn / __float2half_rn and must agree bit for bit), checked exhaustively:
 *  - every bf16 and every fp16 bit pattern decodes to the value computed here with ldexp (NaN: fp16 gives
 *    0x7FFFFFFF, bf16 keeps its bits) and encodes back to itself (NaN to 0x7FFF);
 *  - floats encode to what round-to-nearest-even gives by an independent rule: walk the float magnitudes
 *    upwards in order, and move to the next bf16 / fp16 each time the value passes the midpoint between two
 *    neighbours (computed in double from the ldexp values), at a tie only when the lower neighbour is odd;
 *    above the largest finite value the next neighbour is 2^128 / 2^16, so values from that midpoint on (ties
 *    included, the largest finite being odd) become infinity. Sampled points find their place by bisection.
 *    Both signs. fp16: every float from below 2^-25 to above 65520 (345M), a sample beyond (all 0 or inf).
 *    bf16: every float of 1,664 whole bf16 intervals (exponents at the edges: subnormals, smallest normals,
 *    around 1, largest finite, infinity), and for every other interval the low halves at and next to the tie
 *    and the ends plus random ones. All 2^32 take ~20 s here, too long for a unit test; instead these
 *    functions were compared with CUDA's intrinsics on every float and every half on an H200, once, outside
 *    the tree (no difference).
 *  - every NaN, both signs, gives 0x7FFF.
 */
#include "check.h"
#include "ref/attn_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- independent decoding --------------------------------------------------------------------------- */

static double bf16_value(uint32_t h) { /* finite and infinite patterns */
  const int sign = (h >> 15) & 1, x = (int)(h >> 7) & 0xFF, m = (int)(h & 0x7F);
  double v = x == 0xFF ? INFINITY : x ? ldexp((double)(m | 0x80), x - 134) : ldexp((double)m, -133);
  return sign ? -v : v;
}

static double fp16_value(uint32_t h) {
  const int sign = (h >> 15) & 1, x = (int)(h >> 10) & 0x1F, m = (int)(h & 0x3FF);
  double v = x == 0x1F ? INFINITY : x ? ldexp((double)(m | 0x400), x - 25) : ldexp((double)m, -24);
  return sign ? -v : v;
}

static void decode_and_round_trip(void) {
  int bad_bf16 = 0, bad_fp16 = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    /* bf16: the top half of the fp32, NaN payloads included; back to itself, NaN to 0x7FFF. */
    const int bf16_nan = (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu);
    const float b = sy__bf16_to_float((uint16_t)h);
    if (check_float_bits(b) != h << 16 || (!bf16_nan && (double)b != bf16_value(h))) {
      if (bad_bf16++ < 5) fprintf(stderr, "bf16 0x%04x decodes to 0x%08x\n", h, check_float_bits(b));
    }
    const uint16_t b_back = sy__float_to_bf16(b);
    if (b_back != (bf16_nan ? 0x7FFF : h)) {
      if (bad_bf16++ < 5) fprintf(stderr, "bf16 0x%04x round-trips to 0x%04x\n", h, b_back);
    }
    /* fp16: exact, subnormals normalised; NaN to 0x7FFFFFFF; back to itself, NaN to 0x7FFF. */
    const int fp16_nan = (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu);
    const float f = sy__fp16_to_float((uint16_t)h);
    if (fp16_nan ? check_float_bits(f) != 0x7FFFFFFFu
                 : ((double)f != fp16_value(h) || (check_float_bits(f) >> 31) != h >> 15)) {
      if (bad_fp16++ < 5) fprintf(stderr, "fp16 0x%04x decodes to 0x%08x\n", h, check_float_bits(f));
    }
    const uint16_t f_back = sy__float_to_fp16(f);
    if (f_back != (fp16_nan ? 0x7FFF : h)) {
      if (bad_fp16++ < 5) fprintf(stderr, "fp16 0x%04x round-trips to 0x%04x\n", h, f_back);
    }
  }
  CHECK_EQ_INT(bad_bf16, 0);
  CHECK_EQ_INT(bad_fp16, 0);
}

/* ---- every float -------------------------------------------------------------------------------------- */

/* mid[h]: the midpoint between positive finite h and h + 1 (the next after the largest finite one being
 * 2^128 for bf16, 2^16 for fp16). */
static double bf16_mid[0x7F80], fp16_mid[0x7C00];

static void midpoints(void) {
  for (uint32_t h = 0; h < 0x7F80; h++)
    bf16_mid[h] = (bf16_value(h) + (h + 1 < 0x7F80 ? bf16_value(h + 1) : ldexp(1.0, 128))) / 2;
  for (uint32_t h = 0; h < 0x7C00; h++)
    fp16_mid[h] = (fp16_value(h) + (h + 1 < 0x7C00 ? fp16_value(h + 1) : 65536.0)) / 2;
}

/* The rounding of magnitude x given the result for a smaller magnitude: advance past every midpoint below x,
 * and past one equal to x when the lower neighbour is odd. */
static uint32_t advance(const double *mid, uint32_t h, uint32_t inf, double x) {
  while (h < inf && (x > mid[h] || (x == mid[h] && (h & 1)))) h++;
  return h;
}

static uint32_t start_at(const double *mid, uint32_t inf, double x) { /* the same, from zero, by bisection */
  uint32_t lo = 0, hi = inf; /* the answer is the first h whose midpoint x does not pass */
  while (lo < hi) {
    uint32_t h = (lo + hi) / 2;
    if (x > mid[h] || (x == mid[h] && (h & 1))) lo = h + 1;
    else hi = h;
  }
  return lo;
}

enum { BF16 = 1, FP16 = 2 };

typedef struct tally {
  long long checked, bad;
} tally_t;

/* Checks the magnitudes first, first + stride, ... below last (and their negatives) in the formats of `which`:
 * stride 1 walks the midpoints, others find the result by bisection. */
static void check_range(uint32_t first, uint32_t last, uint32_t stride, int which, tally_t *t) {
  const double x0 = (double)check_bits_float(first);
  uint32_t hb = start_at(bf16_mid, 0x7F80, x0), hf = start_at(fp16_mid, 0x7C00, x0);
  for (uint32_t u = first; u < last; u += stride) {
    const float f = check_bits_float(u);
    const double x = (double)f;
    if (which & BF16) {
      hb = stride == 1 ? advance(bf16_mid, hb, 0x7F80, x) : start_at(bf16_mid, 0x7F80, x);
      const uint16_t b = sy__float_to_bf16(f), nb = sy__float_to_bf16(-f);
      if ((b != hb || nb != (0x8000u | hb)) && t->bad++ < 5)
        fprintf(stderr, "float 0x%08x: bf16 0x%04x / 0x%04x of the negative, want 0x%04x\n", u, b, nb, hb);
    }
    if (which & FP16) {
      hf = stride == 1 ? advance(fp16_mid, hf, 0x7C00, x) : start_at(fp16_mid, 0x7C00, x);
      const uint16_t h = sy__float_to_fp16(f), nh = sy__float_to_fp16(-f);
      if ((h != hf || nh != (0x8000u | hf)) && t->bad++ < 5)
        fprintf(stderr, "float 0x%08x: fp16 0x%04x / 0x%04x of the negative, want 0x%04x\n", u, h, nh, hf);
    }
    t->checked++;
    if (u > UINT32_MAX - stride) break;
  }
}

/* fp16: every float whose magnitude is near the fp16 range, from below half the smallest subnormal (2^-25)
 * to above the overflow threshold (65520); beyond those, a sample (everything there is 0 or infinity). */
static void *fp16_floats(void *arg) {
  tally_t *t = arg;
  check_range(0x32F00000u, 0x47810000u, 1, FP16, t);
  check_range(0, 0x32F00000u, 997, FP16, t);
  check_range(0x47810000u, 0x7F800001u, 997, FP16, t);
  return NULL;
}

/* bf16: all 65536 low halves below every top half whose exponent is one of the edges (subnormals, the
 * smallest normals, around 1, the largest finite and infinity); for every other top half, the low halves
 * at and around the tie and the ends, and a few random ones. */
static void *bf16_floats(void *arg) {
  tally_t *t = arg;
  static const uint32_t edges[] = {0, 1, 2, 63, 64, 126, 127, 128, 190, 252, 253, 254, 255};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
    for (uint32_t m = 0; m < 128; m++) {
      const uint32_t top = edges[i] << 7 | m;
      const uint32_t end = edges[i] < 255 ? (top << 16) + 0x10000u : m == 0 ? (top << 16) + 1 : top << 16; /* inf */
      check_range(top << 16, end, 1, BF16, t);
    }
  }
  static const uint32_t lows[] = {0x0000, 0x0001, 0x0002, 0x3FFF, 0x4000, 0x7FFE, 0x7FFF,
                                  0x8000, 0x8001, 0x8002, 0xBFFF, 0xC000, 0xFFFE, 0xFFFF};
  uint64_t rng = 0x6f1e5eedull;
  for (uint32_t top = 0; top <= 0x7F80; top++) {
    for (size_t i = 0; i < sizeof lows / sizeof lows[0] + 8; i++) {
      uint32_t low = i < sizeof lows / sizeof lows[0]
                         ? lows[i]
                         : (uint32_t)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 48);
      const uint32_t u = top << 16 | low;
      if (u <= 0x7F800000u) check_range(u, u + 1, 2, BF16, t);
    }
  }
  return NULL;
}

static void every_float(void) {
  midpoints();
  tally_t tb = {0, 0}, tf = {0, 0};
  pthread_t thread;
  const int threaded = pthread_create(&thread, NULL, fp16_floats, &tf) == 0; /* the two formats side by side */
  bf16_floats(&tb);
  if (threaded) pthread_join(thread, NULL);
  else fp16_floats(&tf);
  CHECK_EQ_INT(tb.bad, 0);
  CHECK_EQ_INT(tf.bad, 0);
  CHECK(tb.checked > 80000000 && tf.checked > 300000000);
  printf("floats checked: %lld for bf16, %lld for fp16 (and their negatives)\n", tb.checked, tf.checked);
  /* Every NaN, both signs. */
  long long bad_nan = 0;
  for (uint32_t u = 0x7F800001u; u != 0x80000000u; u++) {
    bad_nan += sy__float_to_bf16(check_bits_float(u)) != 0x7FFF ||
               sy__float_to_bf16(check_bits_float(u | 0x80000000u)) != 0x7FFF;
    bad_nan += sy__float_to_fp16(check_bits_float(u)) != 0x7FFF ||
               sy__float_to_fp16(check_bits_float(u | 0x80000000u)) != 0x7FFF;
  }
  CHECK_EQ_INT(bad_nan, 0);
}

/* A few named cases, so a failure reads plainly. */
static void named_cases(void) {
  CHECK_EQ_INT(sy__float_to_bf16(1.0f), 0x3F80);
  CHECK_EQ_INT(sy__float_to_bf16(check_bits_float(0x3F808000u)), 0x3F80); /* tie, even below */
  CHECK_EQ_INT(sy__float_to_bf16(check_bits_float(0x3F818000u)), 0x3F82); /* tie, even above */
  CHECK_EQ_INT(sy__float_to_bf16(check_bits_float(0x3F808001u)), 0x3F81);
  CHECK_EQ_INT(sy__float_to_bf16(check_bits_float(0x7F7F8000u)), 0x7F80); /* the largest finite's tie: infinity */
  CHECK_EQ_INT(sy__float_to_bf16(check_bits_float(0x7F7F7FFFu)), 0x7F7F);
  CHECK_EQ_INT(sy__float_to_bf16(check_bits_float(0x00008000u)), 0x0000); /* subnormal tie to even zero */
  CHECK_EQ_INT(sy__float_to_bf16(check_bits_float(0x80018000u)), 0x8002);
  CHECK_EQ_INT(sy__float_to_bf16(check_bits_float(0xFFC00001u)), 0x7FFF);
  CHECK_EQ_INT(sy__float_to_fp16(1.0f), 0x3C00);
  CHECK_EQ_INT(sy__float_to_fp16(65504.0f), 0x7BFF);
  CHECK_EQ_INT(sy__float_to_fp16(65519.996f), 0x7BFF);
  CHECK_EQ_INT(sy__float_to_fp16(65520.0f), 0x7C00);
  CHECK_EQ_INT(sy__float_to_fp16(-1e30f), 0xFC00);
  CHECK_EQ_INT(sy__float_to_fp16(ldexpf(1.0f, -24)), 0x0001);
  CHECK_EQ_INT(sy__float_to_fp16(ldexpf(1.0f, -25)), 0x0000); /* tie to even zero */
  CHECK_EQ_INT(sy__float_to_fp16(ldexpf(3.0f, -25)), 0x0002); /* 1.5 ulp: tie to even 2 */
  CHECK_EQ_INT(sy__float_to_fp16(ldexpf(1.0f, -25) * 1.0000001f), 0x0001);
  CHECK_EQ_INT(sy__float_to_fp16(ldexpf(1023.5f, -24)), 0x0400); /* up into the normals */
  CHECK_EQ_INT(sy__float_to_fp16(check_bits_float(0x00000001u)), 0x0000);
  CHECK_EQ_INT(sy__float_to_fp16(-0.0f), 0x8000);
  CHECK_EQ_INT(sy__float_to_fp16(check_bits_float(0xFF800001u)), 0x7FFF);
  CHECK_EQ_INT(check_float_bits(sy__fp16_to_float(0x0001)), check_float_bits(ldexpf(1.0f, -24)));
  CHECK_EQ_INT(check_float_bits(sy__fp16_to_float(0x83FF)), check_float_bits(-ldexpf(1023.0f, -24)));
  CHECK_EQ_INT(check_float_bits(sy__fp16_to_float(0xFC00)), 0xFF800000u);
  CHECK_EQ_INT(check_float_bits(sy__fp16_to_float(0xFE00)), 0x7FFFFFFFu);
}

int main(void) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  named_cases();
  decode_and_round_trip();
  every_float();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("conversions checked in %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  return check_report();
}
