/*
 * test_gpu_fp8.cu — the FP8 rules of src/ref/fp8.h on the GPU itself: the shared encoder against the hardware
 * conversion (__nv_cvt_float_to_fp8 and PTX cvt.rn.satfinite.e4m3x2.f32) on all 2^32 floats, the decoder on
 * all 256 codes, group scales (device vs host) on every bf16 amax and a float sample, and x / scale
 * quantisation for every bf16 x under thousands of scales (device vs host), the kernels' quotient by the
 * reciprocal (sy__fp8_div_recip) against IEEE division on every (bf16 amax, bf16 x) pair, and quantise16 against
 * the host on groups that take either of its branches. One GPU; run under syrun it runs
 * once per rank. Written from a helper's out-of-tree checker; it found the encoder bit-exact on an H100.
 */
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <vector>

#include "cuda/fp8.cuh"
#include "gpu_test.h"
#include "ref/fp8.h"

#define CK(x) GT_CUDA(x)

__global__ void enc_all(uint64_t base, unsigned long long *bad, uint32_t *first, unsigned long long *nan_neg_hw) {
  uint64_t i = base + (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t u = (uint32_t)i;
  float f = __uint_as_float(u);
  uint8_t hw = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
  uint16_t raw;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(raw) : "f"(f), "f"(0.0f));
  uint8_t sw = sy__fp8_e4m3_encode(f);
  if (hw != sw || (uint8_t)raw != hw || (raw >> 8) != 0) {
    unsigned long long n = atomicAdd(bad, 1ull);
    if (n < 32) {
      first[2 * n] = u;
      first[2 * n + 1] = hw | (sw << 8) | ((uint32_t)raw << 16);
    }
  }
  if ((u & 0x7FFFFFFFu) > 0x7F800000u && hw != 0x7F) atomicAdd(nan_neg_hw, 1ull);
}

__global__ void decode_all(float *mine, float *hw) {
  int q = threadIdx.x;
  mine[q] = sy__fp8_e4m3_decode((uint8_t)q);
  __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q, __NV_E4M3);
  hw[q] = __half2float(__half(h));
}

__global__ void scales_k(const float *amax, int n, float *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[2 * i] = sy__fp8_scale(amax[i], 0);
    out[2 * i + 1] = sy__fp8_scale(amax[i], 1);
  }
}

__global__ void quant_hash(const float *scales, unsigned *hash) {
  const float scale = scales[blockIdx.x];
  unsigned acc = 0;
  for (unsigned b = threadIdx.x; b < 65536; b += blockDim.x) {
    float x = __uint_as_float(b << 16);
    acc += (unsigned)sy__fp8_quantize(x, scale) * (b * 2654435761u + 1u);
  }
  atomicAdd(&hash[blockIdx.x], acc);
}

/* Every (bf16 amax, bf16 x of either sign with |x| <= amax) under both scale modes where the scale passes
 * sy__fp8_recip_ok: the E4M3 code (the hardware conversion) of sy__fp8_div_recip against that of IEEE division.
 * Block (a - 1, mode). */
__global__ void recip_all(unsigned long long *pairs, unsigned long long *bad, uint32_t *first) {
  const uint32_t a = blockIdx.x + 1;
  const float s = sy__fp8_scale(__uint_as_float(a << 16), (int)blockIdx.y);
  if (!sy__fp8_recip_ok(s)) return;
  const float r = 1.0f / s;
  unsigned n = 0;
  for (uint32_t x16 = threadIdx.x; x16 <= a; x16 += blockDim.x)
    for (uint32_t sign = 0; sign < 2; sign++, n++) {
      const float x = __uint_as_float((x16 | sign << 15) << 16);
      const uint8_t want = __nv_cvt_float_to_fp8(__fdiv_rn(x, s), __NV_SATFINITE, __NV_E4M3);
      const uint8_t got = __nv_cvt_float_to_fp8(sy__fp8_div_recip(x, s, r), __NV_SATFINITE, __NV_E4M3);
      if (want != got) {
        const unsigned long long i = atomicAdd(bad, 1ull);
        if (i < 16) first[i] = a << 16 | x16 | sign << 15;
      }
    }
  n = __reduce_add_sync(0xFFFFFFFFu, n);
  if ((threadIdx.x & 31) == 0) atomicAdd(pairs, (unsigned long long)n);
}

/* quantise16 itself (cuda/fp8.cuh, what the MoE kernels run), a warp 4 groups of 128: both branches (the
 * reciprocal, and the division for a scale below SY_FP8_RECIP_MIN, infinite or NaN). */
__global__ void quant_groups(const uint16_t *x, int groups, int ue8m0, uint8_t *q, float *scales) {
  const int lane = threadIdx.x & 31, warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int el = warp * 512 + lane * 16;
  if (warp * 4 >= groups) return; /* whole warps: groups is a multiple of 4 */
  float scale;
  const uint4 v = sy::quantise16<true>(*(const uint4 *)(x + el), *(const uint4 *)(x + el + 8), ue8m0, &scale);
  *(uint4 *)(q + el) = v;
  if ((lane & 7) == 0) scales[el / 128] = scale;
}

__global__ void fmax_nan(float *out) {
  out[0] = fmaxf(0.0f, __uint_as_float(0x7FC00000u));
  out[1] = fmaxf(__uint_as_float(0xFFC00001u), 3.0f);
}

static float bf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t fb(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static bool same(float a, float b) { return fb(a) == fb(b) || (a != a && b != b); }

int main() {
  gt_require_gpu("test_gpu_fp8");
  unsigned long long *d_bad, *d_nan;
  uint32_t *d_first;
  CK(cudaMalloc(&d_bad, 8));
  CK(cudaMalloc(&d_nan, 8));
  CK(cudaMalloc(&d_first, 64 * 4));
  CK(cudaMemset(d_bad, 0, 8));
  CK(cudaMemset(d_nan, 0, 8));
  const uint64_t chunk = 1ull << 30;
  for (uint64_t base = 0; base < (1ull << 32); base += chunk)
    enc_all<<<chunk / 256, 256>>>(base, d_bad, d_first, d_nan);
  CK(cudaDeviceSynchronize());
  unsigned long long bad, nanbad;
  uint32_t first[64];
  CK(cudaMemcpy(&bad, d_bad, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&nanbad, d_nan, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(first, d_first, 256, cudaMemcpyDeviceToHost));
  printf("encode: all 2^32 floats, mismatches hw vs fp8.h (device) = %llu; NaNs not 0x7F in hw = %llu\n", bad, nanbad);
  for (unsigned long long i = 0; i < bad && i < 32; i++)
    printf("  0x%08x: hw 0x%02x sw 0x%02x raw 0x%04x\n", first[2 * i], first[2 * i + 1] & 0xFF,
           (first[2 * i + 1] >> 8) & 0xFF, first[2 * i + 1] >> 16);

  float *d_m, *d_h;
  CK(cudaMalloc(&d_m, 1024));
  CK(cudaMalloc(&d_h, 1024));
  decode_all<<<1, 256>>>(d_m, d_h);
  CK(cudaDeviceSynchronize());
  float m[256], h[256];
  CK(cudaMemcpy(m, d_m, 1024, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h, d_h, 1024, cudaMemcpyDeviceToHost));
  int dbad = 0;
  for (int q = 0; q < 256; q++)
    if (fb(m[q]) != fb(h[q]) || fb(m[q]) != fb(sy__fp8_e4m3_decode((uint8_t)q))) {
      if (dbad++ < 5)
        printf("  decode 0x%02x: dev %08x hw %08x host %08x\n", q, fb(m[q]), fb(h[q]),
               fb(sy__fp8_e4m3_decode((uint8_t)q)));
    }
  printf("decode: 256 codes, mismatches (device fp8.h / hw e4m3->half->float / host) = %d\n", dbad);

  std::vector<float> amax;
  for (uint32_t b = 0; b < 0x7F81u; b++) amax.push_back(bf(b << 16));     // every non-negative bf16, +inf
  for (uint32_t u = 1; u < 0x7F800000u; u += 4099) amax.push_back(bf(u)); // floats, subnormals included
  amax.push_back(bf(0x7FC00000u));
  int n = (int)amax.size();
  float *d_a, *d_s;
  CK(cudaMalloc(&d_a, n * 4));
  CK(cudaMalloc(&d_s, n * 8));
  CK(cudaMemcpy(d_a, amax.data(), n * 4, cudaMemcpyHostToDevice));
  scales_k<<<(n + 255) / 256, 256>>>(d_a, n, d_s);
  CK(cudaDeviceSynchronize());
  std::vector<float> s(2 * n);
  CK(cudaMemcpy(s.data(), d_s, n * 8, cudaMemcpyDeviceToHost));
  int sbad = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < 2; k++)
      if (!same(s[2 * i + k], sy__fp8_scale(amax[i], k))) {
        if (sbad++ < 5)
          printf("  scale amax %a ue8m0 %d: dev %a host %a\n", amax[i], k, s[2 * i + k], sy__fp8_scale(amax[i], k));
      }
  printf("scales: %d amax x 2 modes, device vs host mismatches = %d\n", n, sbad);

  // quantisation x / scale on the device for every bf16 x, against the host, for every 4th bf16 amax's scales
  std::vector<float> qs;
  for (uint32_t b = 1; b < 0x7F80u; b += 16) {
    qs.push_back(s[2 * b]);
    qs.push_back(s[2 * b + 1]);
  }
  int ns = (int)qs.size();
  float *d_qs;
  unsigned *d_hash;
  CK(cudaMalloc(&d_qs, ns * 4));
  CK(cudaMalloc(&d_hash, ns * 4));
  CK(cudaMemcpy(d_qs, qs.data(), ns * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(d_hash, 0, ns * 4));
  quant_hash<<<ns, 256>>>(d_qs, d_hash);
  CK(cudaDeviceSynchronize());
  std::vector<unsigned> hash(ns);
  CK(cudaMemcpy(hash.data(), d_hash, ns * 4, cudaMemcpyDeviceToHost));
  int qbad = 0;
  for (int i = 0; i < ns; i++) {
    unsigned acc = 0;
    for (unsigned b = 0; b < 65536; b++) acc += (unsigned)sy__fp8_quantize(bf(b << 16), qs[i]) * (b * 2654435761u + 1u);
    if (acc != hash[i]) qbad++;
  }
  printf("quantize: 65536 bf16 x %d scales, device vs host hash mismatches = %d\n", ns, qbad);
  // the kernels' quotient by the reciprocal: every pair on the device's own arithmetic
  unsigned long long *d_pairs, *d_rbad, rpairs = 0, rbad = 0, rwant = 0;
  uint32_t *d_rfirst, rfirst[16];
  CK(cudaMalloc(&d_pairs, 8));
  CK(cudaMalloc(&d_rbad, 8));
  CK(cudaMalloc(&d_rfirst, 64));
  CK(cudaMemset(d_pairs, 0, 8));
  CK(cudaMemset(d_rbad, 0, 8));
  recip_all<<<dim3(0x7F7F, 2), 256>>>(d_pairs, d_rbad, d_rfirst);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(&rpairs, d_pairs, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&rbad, d_rbad, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rfirst, d_rfirst, 64, cudaMemcpyDeviceToHost));
  for (int k = 0; k < 2; k++)
    for (uint32_t a = 1; a < 0x7F80u; a++)
      if (sy__fp8_recip_ok(sy__fp8_scale(bf(a << 16), k))) rwant += 2ull * (a + 1);
  printf("quotient by the reciprocal: %llu (amax, x) pairs on the device (want %llu), E4M3 mismatches = %llu\n", rpairs,
         rwant, rbad);
  for (unsigned long long i = 0; i < rbad && i < 16; i++)
    printf("  amax bf16 0x%04x, x bf16 0x%04x\n", rfirst[i] >> 16, rfirst[i] & 0xFFFF);

  // quantise16 against the host's rule: groups of random magnitudes, of tiny ones (the division
  // branch), with an inf (an infinite scale), with a NaN, of signed zeros
  const int G = 4096;
  std::vector<uint16_t> xg((size_t)G * 128);
  uint64_t rs = 0x5eedf8ull;
  auto rnd = [&]() { return (uint32_t)((rs = rs * 6364136223846793005ull + 1442695040888963407ull) >> 33); };
  for (int g = 0; g < G; g++)
    for (int i = 0; i < 128; i++) {
      uint16_t &v = xg[(size_t)g * 128 + i];
      const uint32_t sign = (rnd() & 1) << 15, m = rnd() & 0x7F;
      switch (g % 8) {
        case 4: v = (uint16_t)(sign | (rnd() % 34) << 7 | m); break; // exponents 0..33: amax < 2^-93, bf16 subnormals
        case 5: v = (uint16_t)(i == 77 ? 0x7F80u | sign : sign | (100 + rnd() % 40) << 7 | m); break;
        case 6: v = (uint16_t)(i == 5 ? 0x7FC1u : sign | (100 + rnd() % 40) << 7 | m); break;
        case 7: v = (uint16_t)sign; break;
        default: v = (uint16_t)(sign | (107 + rnd() % 30) << 7 | m); break; // 2^-20 .. 2^9
      }
    }
  uint16_t *d_xg;
  uint8_t *d_qg;
  float *d_sg;
  CK(cudaMalloc(&d_xg, xg.size() * 2));
  CK(cudaMalloc(&d_qg, xg.size()));
  CK(cudaMalloc(&d_sg, G * 4));
  CK(cudaMemcpy(d_xg, xg.data(), xg.size() * 2, cudaMemcpyHostToDevice));
  int gbad = 0;
  for (int ue = 0; ue < 2; ue++) {
    quant_groups<<<G / 4 / 8, 256>>>(d_xg, G, ue, d_qg, d_sg);
    CK(cudaDeviceSynchronize());
    std::vector<uint8_t> qd(xg.size()), qh(xg.size());
    std::vector<float> sd(G), sh(G);
    CK(cudaMemcpy(qd.data(), d_qg, qd.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(sd.data(), d_sg, G * 4, cudaMemcpyDeviceToHost));
    for (int g = 0; g < G; g++) { // the host's rule (ref/fp8.c: sy__fp8_quantize_token): amax by fmaxf from +0
      float amax = 0.0f;
      for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(bf((uint32_t)xg[(size_t)g * 128 + i] << 16)));
      sh[g] = sy__fp8_scale(amax, ue);
      for (int i = 0; i < 128; i++)
        qh[(size_t)g * 128 + i] = sy__fp8_quantize(bf((uint32_t)xg[(size_t)g * 128 + i] << 16), sh[g]);
    }
    for (int g = 0; g < G; g++) {
      bool ok = same(sd[g], sh[g]);
      for (int i = 0; i < 128; i++) ok = ok && qd[(size_t)g * 128 + i] == qh[(size_t)g * 128 + i];
      if (!ok && gbad++ < 5) printf("  quantise16 group %d (kind %d, ue8m0 %d): device differs\n", g, g % 8, ue);
    }
  }
  printf("quantise16: %d groups x 2 modes against the host, mismatching groups = %d\n", G, gbad);

  float fm[2];
  float *d_fm;
  CK(cudaMalloc(&d_fm, 8));
  fmax_nan<<<1, 1>>>(d_fm);
  CK(cudaMemcpy(fm, d_fm, 8, cudaMemcpyDeviceToHost));
  printf("device fmaxf(0, NaN) = %a, fmaxf(-NaN, 3) = %a\n", fm[0], fm[1]);
  if (bad || nanbad) GT_FAIL("encoder: %llu mismatches against the hardware, %llu NaNs not 0x7F", bad, nanbad);
  if (dbad) GT_FAIL("decoder: %d mismatches", dbad);
  if (sbad) GT_FAIL("scales: %d device/host mismatches", sbad);
  if (qbad) GT_FAIL("quantise: %d device/host mismatches", qbad);
  if (rbad || rpairs != rwant)
    GT_FAIL("quotient by the reciprocal: %llu E4M3 mismatches in %llu pairs (want %llu)", rbad, rpairs, rwant);
  if (gbad) GT_FAIL("quantise16: %d groups differ from the host", gbad);
  if (fb(fm[0]) != 0 || fm[1] != 3.0f)
    GT_FAIL("fmaxf does not ignore NaN on this device (the amax reduction relies on it)");
  return gt_finish("test_gpu_fp8");
}
