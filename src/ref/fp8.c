/*
 * fp8.c — the out-of-line forms of fp8.h's E4M3 conversions and group scale, and the quantisation of one
 * token as the host backend's MoE dispatch sends it (the FP8 wires). The arithmetic is fp8.h's SY_HD code,
 * the same the dispatch kernel inlines, so host and GPU results agree bit for bit.
 */
#include "ref/fp8.h"

#include <math.h>

uint8_t sy__fp8_e4m3_from_float(float x) { return sy__fp8_e4m3_encode(x); }

float sy__fp8_e4m3_to_float(uint8_t q) { return sy__fp8_e4m3_decode(q); }

float sy__fp8_group_scale(float amax, int ue8m0) { return sy__fp8_scale(amax, ue8m0); }

void sy__fp8_quantize_token(const uint16_t *bf16, int hidden, int ue8m0, uint8_t *q, float *scales,
                            int64_t scale_stride) {
  enum { GROUP = 128 }; /* SY_MOE_FP8_GROUP */
  for (int g = 0; g < hidden / GROUP; g++) {
    const uint16_t *in = bf16 + (size_t)g * GROUP;
    float amax = 0.0f;
    for (int i = 0; i < GROUP; i++) amax = fmaxf(amax, fabsf(sy__bits_to_float((uint32_t)in[i] << 16)));
    const float scale = sy__fp8_scale(amax, ue8m0);
    for (int i = 0; i < GROUP; i++) {
      q[(size_t)g * GROUP + i] = sy__fp8_quantize(sy__bits_to_float((uint32_t)in[i] << 16), scale);
    }
    scales[g * scale_stride] = scale;
  }
}
