/*
 * layer_weights.h — sy-bench `layer`'s expert weights, one formula for the GPU's fill (layer_mask.cu), the host
 * backend's and the CPU reference's (layer_ffn.c): element i of expert e's matrix (W1: seed 1, W2: seed 2) is a
 * counter-based hash of (seed, e, i) made a uniform value in [-scale/2, scale/2) and rounded to bf16 — integer code
 * and one float multiply, so both sides get the same bits, and the reference can make any expert's weights without
 * reading them from the rank that holds them.
 */
#ifndef SY_BENCH_LAYER_WEIGHTS_H
#define SY_BENCH_LAYER_WEIGHTS_H

#include <stdint.h>

#include "ref/convert.h"

SY_HD uint16_t layer_weight(uint32_t seed, uint32_t expert, uint64_t i, float scale) {
  uint64_t z = i + ((uint64_t)expert << 40) + ((uint64_t)seed << 58) + 0x9E3779B97F4A7C15ull; /* splitmix64 */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  /* (z >> 40) < 2^24: its float, the division by 2^24 and the subtraction of 1/2 are exact; one rounding in the
   * multiply, one in the conversion */
  const float u = (float)(uint32_t)(z >> 40) / 16777216.0f - 0.5f;
  return sy__float_to_bf16(scale * u);
}

#endif
