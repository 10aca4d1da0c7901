/*
 * expand-ceiling.cu — how fast a few SMs can expand rows (issue 19's dispatch at 16 SMs): N tokens of `bytes`
 * each, every token written to K rows of an N x K row output (a fixed random permutation), by
 *   regs   a warp a token, 4 16-byte loads a lane in flight, then the K stores of each (the dispatch's warp_copy);
 *   tma    one lane of each of P warps a block runs a pipeline of S stages of a whole row in shared memory: a bulk
 *          load (cp.async.bulk, an mbarrier) S rows ahead, then K bulk stores of the row from shared memory;
 *   wregs  the stores of regs without the loads (the store ceiling of SM stores);
 *   wtma   the bulk stores of tma without the loads;
 * and a device-to-device cudaMemcpyAsync of the output's bytes beside them (the HBM ceiling). Event time, best of
 * 20 after 3 warm-ups; checks the output of regs and tma.
 *   nvcc -O2 -arch=sm_90 -std=c++17 -o /tmp/expand-ceiling tools/dev/expand-ceiling.cu -lcuda && /tmp/expand-ceiling
 *   [tokens=4096] [bytes=14336] [K=8]; `gather [tokens] [bytes] [K]` (gather_main: K rows in, their weighted
 *   sum out, by registers, by a lane's cp.async ring, by bulk loads into stages); `peer [rows=8192] [bytes=14336]`
 *   on two GPUs (peer_main); `pullx [tokens=4096] [bytes=14336]` on every GPU (up to 4) at once: the pull design's
 *   ceiling (pullx_main; EC_CHUNK=1: bulk copies at 16 SMs with each block's messages a contiguous range, as
 *   src/cuda/moe_ht/pull.cu takes them, against the grid-wide interleave; EC_VMM=1: every source and row buffer
 *   mapped from separate 2 MB physical pieces (cuMemCreate / cuMemMap, a ballast's pieces between them), so that no
 *   translation covers more than 2 MB: whether the TMA unit's address translation is what pull.cu lacks, bench/NOTES.md
 *   run 61; EC_SKEW=B: the stages B bytes (a multiple of 16 below 128) past where they start, as pull.cu's sat before
 *   run 61's alignment). EC_OCCUPANCY=1: only regs on every SM with 1 to 4 blocks an SM (run 31). EC_SCALES=1
 *   (with bytes 7168: the FP8 rows): regs alone, then with each row's bytes / 128 fp32 scales written group-major
 *   (the high-throughput dispatch's recv.scales) and row-major, at 16 and 132 SMs (what the scales cost); group-major
 *   also under an L2 evict_last policy, with the rows' stores streaming (st.global.cs), and row-major then
 *   transposed. EC_EXPERTS=E: the rows in the dispatch's layout (each token K distinct experts of E at random,
 *   rows in (expert, token) order) instead of a random permutation.
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>

#include "probe_check.cuh"

/* A token's K distinct experts of E, drawn with rand() (its seed the caller's). */
static void draw_experts(int *e, int K, int E) {
  for (int k = 0; k < K; k++) {
    int x, dup;
    do {
      x = rand() % E, dup = 0;
      for (int j = 0; j < k; j++) dup |= e[j] == x;
    } while (dup);
    e[k] = x;
  }
}

/* Event time of launch() on st, best of 20 after 3 warm-ups, in us. */
template <class Launch>
static float best_us(cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1, Launch &&launch) {
  float best = 1e30f;
  for (int it = 0; it < 23; it++) {
    CK(cudaEventRecord(e0, st));
    launch();
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (it >= 3 && ms < best) best = ms;
  }
  return best * 1000.0f;
}

__device__ __forceinline__ uint32_t saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* A warp: token t's `bytes` to its K rows (lane i < K holds row d of the i-th), 4 16-byte loads a lane in flight
 * (write_only: no loads, the store ceiling; cs: streaming stores, st.global.cs, evict-first in L2; cg: the loads
 * by ld.global.cg, past L1 — another GPU's memory, `pullx`). */
__device__ __forceinline__ void copy_token(const char *in, char *out, int d, int t, int bytes, int K, int write_only,
                                           bool cs = false, bool cg = false) {
  const int lane = threadIdx.x & 31;
  for (int base = lane * 16; base < bytes; base += 4 * 512) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; u++)
      if (base + u * 512 < bytes)
        v[u] = write_only ? make_uint4(t, u, 0, 0)
               : cg       ? __ldcg((const uint4 *)(in + (size_t)t * bytes + base + u * 512))
                          : __ldg((const uint4 *)(in + (size_t)t * bytes + base + u * 512));
    for (int i = 0; i < K; i++) {
      char *o = out + (size_t)__shfl_sync(0xffffffffu, d, i) * bytes;
#pragma unroll
      for (int u = 0; u < 4; u++)
        if (base + u * 512 < bytes) {
          if (cs) __stcs((uint4 *)(o + base + u * 512), v[u]);
          else *(uint4 *)(o + base + u * 512) = v[u];
        }
    }
  }
}

/* regs with an FP8 row's scales: bytes / 128 fp32 a token (isc [n][groups]) written with each of its K rows, into
 * osc group-major ([groups][rows], the high-throughput dispatch's recv.scales) or row-major ([rows][groups]).
 * mode: 0 row-major; 1 group-major; 2 group-major with the scale stores under an L2 evict_last policy; 3 as 2 with
 * the rows' stores streaming (st.global.cs); 4 group-major with the rows streaming; 5 row-major (into the scratch
 * that k_transpose then turns group-major). */
__global__ void __launch_bounds__(512) k_regs_scales(const char *in, const float *isc, char *out, float *osc,
                                                     const int *dst, int n, int bytes, int K, int rows, int mode) {
  const int warp = blockIdx.x * 16 + threadIdx.x / 32, warps = gridDim.x * 16, lane = threadIdx.x & 31;
  const int groups = bytes / 128;
  const bool gm = mode >= 1 && mode <= 4, hint = mode == 2 || mode == 3, cs = mode == 3 || mode == 4;
  uint64_t pol = 0;
  if (hint) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  for (int t = warp; t < n; t += warps) {
    const int d = lane < K ? dst[(size_t)t * K + lane] : 0;
    copy_token(in, out, d, t, bytes, K, 0, cs);
    for (int g0 = 0; g0 < groups; g0 += 32) {
      const int g = g0 + lane;
      const float v = g < groups ? __ldg(isc + (size_t)t * groups + g) : 0.0f;
      for (int i = 0; i < K; i++) {
        const int r = __shfl_sync(0xffffffffu, d, i);
        if (g >= groups) continue;
        float *p = osc + (gm ? (size_t)g * rows + r : (size_t)r * groups + g);
        if (hint) asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(p), "f"(v), "l"(pol) : "memory");
        else *p = v;
      }
    }
  }
}

/* rm [rows][groups] -> gm [groups][rows] through 32 x 33 tiles of shared memory (a block of 32 x 8 threads). */
__global__ void k_transpose(const float *rm, float *gm, int rows, int groups) {
  __shared__ float tile[32][33];
  const int r0 = blockIdx.x * 32, g0 = blockIdx.y * 32, tx = threadIdx.x, ty = threadIdx.y;
  for (int j = ty; j < 32; j += 8)
    if (r0 + j < rows && g0 + tx < groups) tile[j][tx] = rm[(size_t)(r0 + j) * groups + g0 + tx];
  __syncthreads();
  for (int j = ty; j < 32; j += 8)
    if (g0 + j < groups && r0 + tx < rows) gm[(size_t)(g0 + j) * rows + r0 + tx] = tile[tx][j];
}

__global__ void __launch_bounds__(512)
    k_regs(const char *in, char *out, const int *dst, int n, int bytes, int K, int write_only) {
  const int warp = blockIdx.x * 16 + threadIdx.x / 32, warps = gridDim.x * 16, lane = threadIdx.x & 31;
  for (int t = warp; t < n; t += warps)
    copy_token(in, out, lane < K ? dst[(size_t)t * K + lane] : 0, t, bytes, K, write_only);
}

/* Lane 0 of warp w < P of a block: a pipeline of n items through S stages of `bytes` of shared memory (the block's
 * [P][S] stages, mbarriers bar[64]): item j bulk-loaded from src(j) (nothing with write_only), then bulk-stored into
 * rows dst(j, i), i < k(j), of `out`; a stage is reloaded with item j - 1 + S once item j - 1's stores have read it, so
 * item j's stores stay in flight meanwhile (k_tma, k_pull_tma). Returns early on the other threads. */
template <class Src, class Count, class Dst>
__device__ void tma_pipeline(char *sm, uint64_t *bar, char *out, int n, int bytes, int P, int S, bool write_only,
                             Src src, Count k, Dst dst) {
  const int w = threadIdx.x / 32;
  if (w >= P || (threadIdx.x & 31)) return;
  char *stage = sm + (size_t)w * S * bytes;
  uint64_t *b = bar + w * S;
  for (int s = 0; s < S; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&b[s])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  auto load = [&](int j) {
    const int s = j % S;
    if (write_only) return;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(&b[s])), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     saddr(stage + (size_t)s * bytes)),
                 "l"(src(j)), "r"(bytes), "r"(saddr(&b[s]))
                 : "memory");
  };
  for (int j = 0; j < S && j < n; j++) load(j);
  for (int j = 0; j < n; j++) {
    const int s = j % S;
    if (!write_only) {
      const uint32_t parity = (j / S) & 1;
      asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(
                       saddr(&b[s])),
                   "r"(parity)
                   : "memory");
    }
    for (int i = 0; i < k(j); i++)
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(out + (size_t)dst(j, i) * bytes),
                   "r"(saddr(stage + (size_t)s * bytes)), "r"(bytes)
                   : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (j >= 1 && j - 1 + S < n) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(j - 1 + S);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* P pipelines a block (lane 0 of warps 0..P-1), S stages of `bytes` each; pipeline p's tokens p, p + pipes, ... */
__global__ void k_tma(const char *in, char *out, const int *dst, int n, int bytes, int K, int P, int S,
                      int write_only) {
  extern __shared__ __align__(128) char sm[];
  __shared__ __align__(8) uint64_t bar[64];
  const int pipe = blockIdx.x * P + threadIdx.x / 32, pipes = gridDim.x * P;
  const int mine = pipe < n ? (n - pipe + pipes - 1) / pipes : 0;
  tma_pipeline(
      sm, bar, out, mine, bytes, P, S, write_only != 0, [&](int j) { return in + (size_t)(pipe + j * pipes) * bytes; },
      [&](int) { return K; }, [&](int j, int i) { return dst[(size_t)(pipe + j * pipes) * K + i]; });
}

/* ---- the gather-sums (the combine's experts' side: K rows in, their weighted fp32 sum out as one bf16 row) ---- */
__device__ __forceinline__ float bflo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bfhi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *(const uint32_t *)&h;
}
__device__ __forceinline__ void acc8(float *a, uint4 v, float w) {
  const uint32_t x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++)
    a[2 * i] = fmaf(w, bflo(x[i]), a[2 * i]), a[2 * i + 1] = fmaf(w, bfhi(x[i]), a[2 * i + 1]);
}
__device__ __forceinline__ uint4 out8(const float *a) {
  return make_uint4(pack2(a[0], a[1]), pack2(a[2], a[3]), pack2(a[4], a[5]), pack2(a[6], a[7]));
}

/* a warp a token, U 512-byte passes of every row loaded before the sums */
template <int U>
__global__ void __launch_bounds__(512) g_regs(const char *in, char *out, const int *src, int n, int bytes, int K) {
  const int warp = blockIdx.x * 16 + threadIdx.x / 32, warps = gridDim.x * 16, lane = threadIdx.x & 31;
  for (int t = warp; t < n; t += warps) {
    const int my = lane < K ? src[(size_t)t * K + lane] : 0;
    for (int base = lane * 16; base < bytes; base += U * 512) {
      float a[U][8];
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int q = 0; q < 8; q++) a[u][q] = 0.0f;
      for (int k0 = 0; k0 < K; k0 += 4) {
        uint4 v[4][U];
#pragma unroll
        for (int k = 0; k < 4; k++) {
          const char *r = in + (size_t)__shfl_sync(0xffffffffu, my, (k0 + k) & 31) * bytes;
#pragma unroll
          for (int u = 0; u < U; u++)
            if (k0 + k < K && base + u * 512 < bytes) v[k][u] = __ldg((const uint4 *)(r + base + u * 512));
        }
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
          for (int u = 0; u < U; u++)
            if (k0 + k < K) acc8(a[u], v[k][u], 0.5f + 0.125f * (k0 + k));
      }
#pragma unroll
      for (int u = 0; u < U; u++)
        if (base + u * 512 < bytes) *(uint4 *)(out + (size_t)t * bytes + base + u * 512) = out8(a[u]);
    }
  }
}

/* a warp a token through a lane's cp.async ring (pipe.cuh's pipe_gather: 16 slots, 14 pieces ahead) */
__global__ void __launch_bounds__(512) g_pipe(const char *in, char *out, const int *src, int n, int bytes, int K) {
  extern __shared__ __align__(16) uint4 ring_[]; /* [16 warps][16 slots][32 lanes] */
  uint4(*ring)[16][32] = (uint4(*)[16][32])ring_;
  const int w = threadIdx.x / 32, warp = blockIdx.x * 16 + w, warps = gridDim.x * 16, lane = threadIdx.x & 31;
  const int passes = (bytes + 511) / 512;
  for (int t = warp; t < n; t += warps) {
    const int my = lane < K ? src[(size_t)t * K + lane] : 0;
    int ipass = 0, isrc = 0, islot = 0, rslot = 0;
    auto issue = [&]() {
      if (ipass < passes) {
        const int off = ipass * 512 + lane * 16;
        const char *r = in + (size_t)__shfl_sync(0xffffffffu, my, isrc) * bytes;
        if (off < bytes)
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(&ring[w][islot][lane])), "l"(r + off)
                       : "memory");
        if (++islot == 16) islot = 0;
        if (++isrc == K) isrc = 0, ipass++;
      }
      asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (int d = 0; d < 14; d++) issue();
    for (int pass = 0; pass < passes; pass++) {
      float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int i = 0; i < K; i++) {
        asm volatile("cp.async.wait_group 13;" ::: "memory");
        const uint4 v = ring[w][rslot][lane];
        if (++rslot == 16) rslot = 0;
        issue();
        acc8(a, v, 0.5f + 0.125f * i);
      }
      const int off = pass * 512 + lane * 16;
      if (off < bytes) *(uint4 *)(out + (size_t)t * bytes + off) = out8(a);
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  }
}

/* a block's producer (warp 0, lane 0) bulk-loads item i = (token, chunk of the row) — the K rows' chunk — into
 * stage i % S, S <= 15 stages of K x ch bytes; consumer warp 1 + i % S sums it (a lane 16 bytes at a time) and stores
 * the output chunk, then frees the stage. */
__global__ void __launch_bounds__(512)
    g_tma(const char *in, char *out, const int *src, int n, int bytes, int K, int cpr, int S) {
  extern __shared__ __align__(128) char sm[];
  __shared__ __align__(8) uint64_t full[32], empty[32];
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int ch = bytes / cpr;
  if (threadIdx.x < S) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&full[threadIdx.x])) : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&empty[threadIdx.x])) : "memory");
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const int mine = blockIdx.x < n ? (n - blockIdx.x + gridDim.x - 1) / gridDim.x : 0, items = mine * cpr;
  if (w == 0) {
    if (lane) return;
    for (int i = 0; i < items; i++) {
      const int s = i % S, u = i / S;
      if (u > 0)
        asm volatile(
            "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(
                saddr(&empty[s])),
            "r"((u - 1) & 1)
            : "memory");
      const int t = blockIdx.x + (i / cpr) * gridDim.x, c = i % cpr;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(&full[s])), "r"(K * ch)
                   : "memory");
      for (int k = 0; k < K; k++)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         saddr(sm + ((size_t)s * K + k) * ch)),
                     "l"(in + (size_t)src[(size_t)t * K + k] * bytes + (size_t)c * ch), "r"(ch), "r"(saddr(&full[s]))
                     : "memory");
    }
    return;
  }
  for (int i = w - 1; w <= S && i < items; i += S) { /* warp w consumes stage w - 1, so its phases in order */
    const int s = i % S, u = i / S;
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(
                     saddr(&full[s])),
                 "r"(u & 1)
                 : "memory");
    const int t = blockIdx.x + (i / cpr) * gridDim.x, c = i % cpr;
    for (int off = lane * 16; off < ch; off += 512) {
      float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int k = 0; k < K; k++) acc8(a, *(const uint4 *)(sm + ((size_t)s * K + k) * ch + off), 0.5f + 0.125f * k);
      *(uint4 *)(out + (size_t)t * bytes + (size_t)c * ch + off) = out8(a);
    }
    __syncwarp();
    if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr(&empty[s])) : "memory");
  }
}

static int gather_main(int n, int bytes, int K) {
  const size_t rows = (size_t)n * K, in_bytes = rows * bytes, out_bytes = (size_t)n * bytes;
  char *in, *out, *ref;
  int *src;
  CK(cudaMalloc(&in, in_bytes));
  CK(cudaMalloc(&out, out_bytes));
  CK(cudaMalloc(&ref, out_bytes));
  CK(cudaMalloc(&src, rows * 4));
  {
    uint16_t *h = (uint16_t *)malloc(in_bytes);
    for (size_t i = 0; i < in_bytes / 2; i++) h[i] = (uint16_t)(0x3c00 + (i * 2654435761u >> 20) % 512); /* bf16 */
    CK(cudaMemcpy(in, h, in_bytes, cudaMemcpyHostToDevice));
    free(h);
    int *p = (int *)malloc(rows * 4);
    for (size_t i = 0; i < rows; i++) p[i] = (int)i;
    srand(11);
    for (size_t i = rows - 1; i > 0; i--) {
      const size_t j = (size_t)rand() % (i + 1);
      const int x = p[i];
      p[i] = p[j], p[j] = x;
    }
    CK(cudaMemcpy(src, p, rows * 4, cudaMemcpyHostToDevice));
    free(p);
  }
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaFuncSetAttribute(g_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
  CK(cudaFuncSetAttribute(g_pipe, cudaFuncAttributeMaxDynamicSharedMemorySize, 128 * 1024));
  auto timeit = [&](auto &&launch) { return best_us(st, e0, e1, launch); };
  g_regs<2><<<132, 512, 0, st>>>(in, ref, src, n, bytes, K);
  CK(cudaStreamSynchronize(st));
  auto same = [&]() {
    static char *a = (char *)malloc(out_bytes), *b = (char *)malloc(out_bytes);
    CK(cudaMemcpy(a, out, out_bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b, ref, out_bytes, cudaMemcpyDeviceToHost));
    return memcmp(a, b, out_bytes) == 0;
  };
  const double rw = (double)in_bytes + (double)out_bytes;
  printf("gather: %d tokens, K %d rows of %d B each in (%.1f MiB), one row out\n", n, K, bytes, in_bytes / 1048576.0);
  printf("%-8s %5s %4s %3s %10s %12s %12s %s\n", "kind", "SMs", "cpr", "S", "us", "GB/s r+w", "GB/s/SM", "same");
  for (int sms : {16, 24, 32, 132}) {
    fprintf(stderr, "gather: %d SMs\n", sms);
    auto row = [&](const char *kind, int cpr, int S, float us) {
      printf("%-8s %5d %4d %3d %10.1f %12.1f %12.2f %s\n", kind, sms, cpr, S, us, rw / us / 1e3, rw / us / 1e3 / sms,
             same() ? "yes" : "NO");
    };
    CK(cudaMemsetAsync(out, 0, out_bytes, st));
    row("regs1", 0, 0, timeit([&] { g_regs<1><<<sms, 512, 0, st>>>(in, out, src, n, bytes, K); }));
    CK(cudaMemsetAsync(out, 0, out_bytes, st));
    row("regs2", 0, 0, timeit([&] { g_regs<2><<<sms, 512, 0, st>>>(in, out, src, n, bytes, K); }));
    CK(cudaMemsetAsync(out, 0, out_bytes, st));
    row("pipe", 0, 0, timeit([&] { g_pipe<<<sms, 512, 128 * 1024, st>>>(in, out, src, n, bytes, K); }));
    const int cfg[][2] = {{4, 7}, {8, 14}, {16, 15}};
    for (auto &c : cfg) {
      const int cpr = c[0], S = c[1];
      if (bytes % (cpr * 16)) continue;
      const size_t smem = (size_t)S * K * (bytes / cpr);
      if (smem > 220 * 1024) continue;
      CK(cudaMemsetAsync(out, 0, out_bytes, st));
      row("tma", cpr, S, timeit([&] { g_tma<<<sms, 512, smem, st>>>(in, out, src, n, bytes, K, cpr, S); }));
    }
  }
  return 0;
}

/* GPUs [0, G): each one's e0 -> e1 once e1 has passed, the largest, in ms (`peer`, `pullx`). */
static float slowest_ms(int G, cudaEvent_t *e0, cudaEvent_t *e1) {
  float worst = 0;
  for (int g = 0; g < G; g++) {
    CK(cudaSetDevice(g));
    CK(cudaEventSynchronize(e1[g]));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, e0[g], e1[g]));
    worst = ms > worst ? ms : worst;
  }
  return worst;
}

/* `peer`: with two GPUs, the same kernels at K = 1 (a row each, in order) across NVLink: push (GPU 0's SMs store
 * into GPU 1's memory), pull (GPU 0's SMs load from GPU 1's memory into its own), and both directions at once (each
 * GPU pushes into the other's memory). */
static int peer_main(int n, int bytes) {
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (ndev < 2) {
    printf("peer: %d GPU(s), need 2\n", ndev);
    return 0;
  }
  const size_t total = (size_t)n * bytes;
  char *buf[2][2]; /* [gpu][0: source, 1: destination] */
  int *dst[2];
  cudaStream_t st[2];
  cudaEvent_t e0[2], e1[2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CK(cudaMalloc(&buf[g][0], total));
    CK(cudaMalloc(&buf[g][1], total));
    CK(cudaMemset(buf[g][0], 1 + g, total));
    CK(cudaMalloc(&dst[g], (size_t)n * 4));
    int *p = (int *)malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) p[i] = i;
    CK(cudaMemcpy(dst[g], p, (size_t)n * 4, cudaMemcpyHostToDevice));
    free(p);
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0[g]));
    CK(cudaEventCreate(&e1[g]));
    CK(cudaFuncSetAttribute(k_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
  }
  printf("peer: %d rows of %d B (%.1f MiB) a direction\n", n, bytes, total / 1048576.0);
  printf("%-6s %-5s %5s %10s %10s %12s\n", "kind", "dir", "SMs", "us", "GB/s", "GB/s/SM");
  for (int sms : {2, 4, 8, 16, 32}) {
    for (int tma = 0; tma < 2; tma++) {
      for (int dir = 0; dir < 3; dir++) { /* 0 push, 1 pull, 2 both push */
        float best = 1e30f;
        for (int it = 0; it < 13; it++) {
          for (int g = 0; g < (dir == 2 ? 2 : 1); g++) {
            CK(cudaSetDevice(g));
            CK(cudaEventRecord(e0[g], st[g]));
            const char *src = dir == 1 ? buf[1][0] : buf[g][0];
            char *out = dir == 1 ? buf[0][1] : buf[1 - g][1];
            if (tma) k_tma<<<sms, 4 * 32, (size_t)4 * 3 * bytes, st[g]>>>(src, out, dst[g], n, bytes, 1, 4, 3, 0);
            else k_regs<<<sms, 512, 0, st[g]>>>(src, out, dst[g], n, bytes, 1, 0);
            CK(cudaEventRecord(e1[g], st[g]));
          }
          const float worst = slowest_ms(dir == 2 ? 2 : 1, e0, e1);
          if (it >= 3 && worst < best) best = worst;
        }
        const float us = best * 1000.0f;
        static const char *dn[3] = {"push", "pull", "both"};
        printf("%-6s %-5s %5d %10.1f %10.1f %12.2f\n", tma ? "tma" : "regs", dn[dir], sms, us, total / us / 1e3,
               total / us / 1e3 / sms);
      }
    }
  }
  return 0;
}

/* ---- `pullx`: the receivers pull (issue 19's pull design, bench/NOTES.md run 40): every GPU at once, each message
 * (a source GPU's token with >= 1 of its 8 experts on this GPU) loaded from the source's memory over NVLink, or from
 * its own, and stored to its k rows here. A message: {source GPU, token, first of its rows in `rows`, k}. ---- */
__global__ void __launch_bounds__(512)
    k_pull_regs(const char *const *srcs, const int4 *msg, const int *rows, int nmsg, int bytes, char *out) {
  const int warp = blockIdx.x * 16 + threadIdx.x / 32, warps = gridDim.x * 16, lane = threadIdx.x & 31;
  for (int m = warp; m < nmsg; m += warps) {
    const int4 g = msg[m]; /* token g.y of GPU g.x to its g.w rows rows[g.z ...] */
    copy_token(srcs[g.x], out, lane < g.w ? rows[g.z + lane] : 0, g.y, bytes, g.w, 0, false, true);
  }
}

/* P pipelines a block, S stages of a whole row (tma_pipeline over messages): a bulk load from the source, then the k
 * bulk stores of the row here. */
__global__ void k_pull_tma(const char *const *srcs, const int4 *msg, const int *rows, int nmsg, int bytes, char *out,
                           int P, int S, int chunk, int skew) {
  extern __shared__ __align__(128) char sm[];
  __shared__ __align__(8) uint64_t bar[64];
  int pipe = blockIdx.x * P + threadIdx.x / 32, pipes = gridDim.x * P, end = nmsg;
  if (chunk) { /* block b the messages [b n / G, (b + 1) n / G), its pipes in turn (pull.cu's order: a channel a block) */
    const int lo = (int)((long long)blockIdx.x * nmsg / gridDim.x);
    end = (int)((long long)(blockIdx.x + 1) * nmsg / gridDim.x);
    pipe = lo + threadIdx.x / 32, pipes = P;
  }
  const int mine = pipe < end ? (end - pipe + pipes - 1) / pipes : 0;
  tma_pipeline(
      sm + skew, bar, out, mine, bytes, P, S, false,
      [&](int j) {
        const int4 g = msg[pipe + j * pipes];
        return srcs[g.x] + (size_t)g.y * bytes;
      },
      [&](int j) { return msg[pipe + j * pipes].w; }, [&](int j, int i) { return rows[msg[pipe + j * pipes].z + i]; });
}

static inline char pull_byte(int g, int t, int i) {
  return (char)(((uint32_t)(g * 131071 + t) * 2654435761u + i) >> 7);
}

/* EC_VMM's allocation: `bytes` on GPU g, readable and writable from GPUs [0, G), mapped from 2 MB physical pieces
 * each of its own, with a ballast piece created (and kept) after each so that consecutive pieces are not neighbours
 * in physical memory. */
static void *vmm_alloc(int g, int G, size_t bytes) {
  static bool init = false;
  if (!init && cuInit(0) != CUDA_SUCCESS) {
    fprintf(stderr, "pullx: cuInit failed\n");
    exit(1);
  }
  init = true;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = g;
  size_t gran = 0;
  cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  const size_t piece = gran > (2u << 20) ? gran : (2u << 20), total = (bytes + piece - 1) / piece * piece;
  CUdeviceptr va = 0;
  bool ok = cuMemAddressReserve(&va, total, piece, 0, 0) == CUDA_SUCCESS;
  for (size_t off = 0; ok && off < total; off += piece) {
    CUmemGenericAllocationHandle h, ballast;
    ok = cuMemCreate(&h, piece, &prop, 0) == CUDA_SUCCESS && cuMemMap(va + off, piece, 0, h, 0) == CUDA_SUCCESS &&
         cuMemCreate(&ballast, piece, &prop, 0) == CUDA_SUCCESS;
    cuMemRelease(h); /* (the mapping keeps it) */
  }
  for (int p = 0; ok && p < G; p++) {
    CUmemAccessDesc d = {};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = p;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ok = cuMemSetAccess(va, total, &d, 1) == CUDA_SUCCESS;
  }
  if (!ok) {
    fprintf(stderr, "pullx: EC_VMM: mapping %zu bytes on GPU %d failed\n", bytes, g);
    exit(1);
  }
  return (void *)va;
}

/* `pullx [tokens=4096] [bytes=14336]`: G = the GPUs (up to 4) each with `tokens` tokens routed top-8 of 256 experts
 * (seeded, uniform), experts split evenly; every GPU pulls its messages at once, on 16 / 24 / 32 / 132 SMs, by
 * register loads and by bulk copies; `local` the same messages with every source replaced by the GPU's own memory
 * (the expansion alone). Time = the slowest GPU's, best of 10 after 3 warm-ups. If pull ~ local, an SM's NVLink
 * loads overlap its local stores and the pull design's bound is the stores' (bench/NOTES.md run 40). */
static int pullx_main(int T, int bytes) {
  int G = 0;
  CK(cudaGetDeviceCount(&G));
  if (G > 4) G = 4;
  const int E = 256, K = 8, epg = E / G;
  if (E % G) {
    printf("pullx: %d GPUs do not divide 256 experts\n", G);
    return 0;
  }
  /* routing: e[s][t][k] */
  int *route = (int *)malloc((size_t)G * T * K * 4);
  srand(11);
  for (int i = 0; i < G * T; i++) draw_experts(route + (size_t)i * K, K, E);
  char *src[4], *out[4];
  const char **dsrc[4], **dsrc_local[4];
  int4 *dmsg[4];
  int *drows[4], nmsg[4], nrows[4];
  int4 *hmsg[4];
  int *hrows[4];
  cudaStream_t st[4];
  cudaEvent_t e0[4], e1[4];
  for (int g = 0; g < G; g++) {
    CK(cudaSetDevice(g));
    for (int p = 0; p < G; p++)
      if (p != g) {
        int ok = 0;
        CK(cudaDeviceCanAccessPeer(&ok, g, p));
        if (!ok) {
          printf("pullx: GPU %d cannot reach GPU %d\n", g, p);
          return 0;
        }
        CK(cudaDeviceEnablePeerAccess(p, 0));
      }
    const bool vmm = getenv("EC_VMM") != nullptr;
    if (vmm) src[g] = (char *)vmm_alloc(g, G, (size_t)T * bytes);
    else CK(cudaMalloc(&src[g], (size_t)T * bytes));
    char *h = (char *)malloc((size_t)T * bytes);
    for (int t = 0; t < T; t++)
      for (int i = 0; i < bytes; i++) h[(size_t)t * bytes + i] = pull_byte(g, t, i);
    CK(cudaMemcpy(src[g], h, (size_t)T * bytes, cudaMemcpyHostToDevice));
    free(h);
    /* rows in (local expert, source, token) order; messages in (token, source) order */
    int *cnt = (int *)calloc(epg + 1, 4);
    for (int s = 0; s < G; s++)
      for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
          const int x = route[((size_t)s * T + t) * K + k];
          if (x / epg == g) cnt[x % epg + 1]++;
        }
    for (int x = 0; x < epg; x++) cnt[x + 1] += cnt[x];
    nrows[g] = cnt[epg];
    int *fill = (int *)malloc((size_t)G * T * K * 4); /* row of (s, t, k), -1 when not here */
    for (int s = 0; s < G; s++)
      for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
          const int x = route[((size_t)s * T + t) * K + k];
          fill[((size_t)s * T + t) * K + k] = x / epg == g ? cnt[x % epg]++ : -1;
        }
    hmsg[g] = (int4 *)malloc((size_t)G * T * sizeof(int4));
    hrows[g] = (int *)malloc((size_t)G * T * K * 4);
    int m = 0, r = 0;
    for (int t = 0; t < T; t++)
      for (int s = 0; s < G; s++) {
        const int r0 = r;
        for (int k = 0; k < K; k++)
          if (fill[((size_t)s * T + t) * K + k] >= 0) hrows[g][r++] = fill[((size_t)s * T + t) * K + k];
        if (r > r0) hmsg[g][m++] = make_int4(s, t, r0, r - r0);
      }
    nmsg[g] = m;
    free(fill), free(cnt);
    if (vmm) out[g] = (char *)vmm_alloc(g, G, (size_t)nrows[g] * bytes);
    else CK(cudaMalloc(&out[g], (size_t)nrows[g] * bytes));
    CK(cudaMalloc(&dmsg[g], (size_t)m * sizeof(int4)));
    CK(cudaMemcpy(dmsg[g], hmsg[g], (size_t)m * sizeof(int4), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&drows[g], (size_t)r * 4));
    CK(cudaMemcpy(drows[g], hrows[g], (size_t)r * 4, cudaMemcpyHostToDevice));
    CK(cudaStreamCreateWithFlags(&st[g], cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0[g]));
    CK(cudaEventCreate(&e1[g]));
    CK(cudaFuncSetAttribute(k_pull_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
  }
  for (int g = 0; g < G; g++) {
    CK(cudaSetDevice(g));
    const char *hs[4], *hl[4];
    for (int p = 0; p < G; p++) hs[p] = src[p], hl[p] = src[g];
    CK(cudaMalloc(&dsrc[g], G * sizeof(char *)));
    CK(cudaMalloc(&dsrc_local[g], G * sizeof(char *)));
    CK(cudaMemcpy(dsrc[g], hs, G * sizeof(char *), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dsrc_local[g], hl, G * sizeof(char *), cudaMemcpyHostToDevice));
  }
  double deepep = 0, remote = 0;
  for (int g = 0; g < G; g++) {
    double d = (double)nmsg[g] * bytes, rm = 0;
    for (int m = 0; m < nmsg[g]; m++) rm += hmsg[g][m].x != g ? bytes : 0;
    deepep = d > deepep ? d : deepep, remote = rm > remote ? rm : remote;
  }
  printf(
      "pullx: %d GPU(s), %d tokens of %d B a GPU, top-%d of %d: GPU 0 %d messages (%.1f MB, %.1f MB remote), "
      "%d rows (%.1f MB stored)\n",
      G, T, bytes, K, E, nmsg[0], (double)nmsg[0] * bytes / 1e6, remote / 1e6, nrows[0],
      (double)nrows[0] * bytes / 1e6);
  /* the sender's staging of its tokens into symmetric memory by a copy engine (the pull design's first step) */
  {
    CK(cudaSetDevice(0));
    char *tmp;
    CK(cudaMalloc(&tmp, (size_t)T * bytes));
    const float us = best_us(st[0], e0[0], e1[0], [&] {
      CK(cudaMemcpyAsync(tmp, src[0], (size_t)T * bytes, cudaMemcpyDeviceToDevice, st[0]));
    });
    printf("staging copy of %.1f MB (cudaMemcpyAsync, copy engine): %.1f us\n", (double)T * bytes / 1e6, us);
    CK(cudaFree(tmp));
  }
  printf("%-6s %-6s %5s %3s %3s %10s %12s %12s %s\n", "kind", "from", "SMs", "P", "S", "us", "deepep GB/s",
         "stored GB/s/SM", "ok");
  const int skew = getenv("EC_SKEW") ? atoi(getenv("EC_SKEW")) & 112 : 0; /* the stages off their alignment */
  if (skew) printf("pullx: the stages %d bytes past the dynamic shared memory's start (EC_SKEW)\n", skew);
  /* tma: 0 registers (k_pull_regs), 1 bulk copies (k_pull_tma), 2 bulk copies with each block's messages a range */
  auto run = [&](int tma, int local, int sms, int P, int S) {
    float best = 1e30f;
    for (int it = 0; it < 13; it++) {
      for (int g = 0; g < G; g++) {
        CK(cudaSetDevice(g));
        CK(cudaEventRecord(e0[g], st[g]));
        const char *const *sp = local ? dsrc_local[g] : dsrc[g];
        if (tma)
          k_pull_tma<<<sms, P * 32, (size_t)P * S * bytes + 128, st[g]>>>(sp, dmsg[g], drows[g], nmsg[g], bytes, out[g],
                                                                          P, S, tma == 2, skew);
        else k_pull_regs<<<sms, 512, 0, st[g]>>>(sp, dmsg[g], drows[g], nmsg[g], bytes, out[g]);
        CK(cudaEventRecord(e1[g], st[g]));
      }
      const float worst = slowest_ms(G, e0, e1);
      if (it >= 3 && worst < best) best = worst;
    }
    const char *ok = "-";
    if (!local) { /* every row of GPU 0 against its source token's pattern */
      CK(cudaSetDevice(0));
      char *h = (char *)malloc((size_t)nrows[0] * bytes);
      CK(cudaMemcpy(h, out[0], (size_t)nrows[0] * bytes, cudaMemcpyDeviceToHost));
      bool good = true;
      for (int m = 0; m < nmsg[0] && good; m++)
        for (int i = 0; i < hmsg[0][m].w && good; i++) {
          const char *row = h + (size_t)hrows[0][hmsg[0][m].z + i] * bytes;
          for (int b = 0; b < bytes && good; b += 61) good = row[b] == pull_byte(hmsg[0][m].x, hmsg[0][m].y, b);
        }
      free(h);
      ok = good ? "yes" : "NO";
    }
    const float us = best * 1000.0f;
    static const char *const kind[3] = {"regs", "tma", "chunk"};
    printf("%-6s %-6s %5d %3s %3s %10.1f %12.1f %12.2f %s\n", kind[tma], local ? "local" : "pull", sms,
           tma ? std::to_string(P).c_str() : "-", tma ? std::to_string(S).c_str() : "-", us, deepep / us / 1e3,
           (double)nrows[0] * bytes / us / 1e3 / sms, ok);
  };
  if (getenv("EC_CHUNK")) { /* run 61: the messages a contiguous range a block (pull.cu's order), 16 SMs */
    for (int local = 0; local < 2; local++) run(2, local, 16, 4, 3), run(2, local, 16, 5, 3), run(1, local, 16, 4, 3);
    return 0;
  }
  for (int sms : {16, 24, 32, 132}) {
    for (int local = 0; local < 2; local++) run(0, local, sms, 0, 0);
    const int cfg[][2] = {{4, 3}, {7, 2}, {2, 7}};
    for (auto &c : cfg) {
      if ((size_t)c[0] * c[1] * bytes > 220 * 1024) continue;
      for (int local = 0; local < 2; local++) run(1, local, sms, c[0], c[1]);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && !strcmp(argv[1], "gather"))
    return gather_main(argc > 2 ? atoi(argv[2]) : 4096, argc > 3 ? atoi(argv[3]) : 14336, argc > 4 ? atoi(argv[4]) : 8);
  if (argc > 1 && !strcmp(argv[1], "pullx"))
    return pullx_main(argc > 2 ? atoi(argv[2]) : 4096, argc > 3 ? atoi(argv[3]) : 14336);
  if (argc > 1 && !strcmp(argv[1], "peer"))
    return peer_main(argc > 2 ? atoi(argv[2]) : 8192, argc > 3 ? atoi(argv[3]) : 14336);
  const int n = argc > 1 ? atoi(argv[1]) : 4096, bytes = argc > 2 ? atoi(argv[2]) : 14336,
            K = argc > 3 ? atoi(argv[3]) : 8;
  const size_t in_bytes = (size_t)n * bytes, out_bytes = in_bytes * K;
  char *in, *out, *ref;
  int *dst;
  CK(cudaMalloc(&in, in_bytes));
  CK(cudaMalloc(&out, out_bytes));
  CK(cudaMalloc(&ref, out_bytes));
  CK(cudaMalloc(&dst, (size_t)n * K * 4));
  {
    char *h = (char *)malloc(in_bytes);
    for (size_t i = 0; i < in_bytes; i++) h[i] = (char)(i * 2654435761u >> 13);
    CK(cudaMemcpy(in, h, in_bytes, cudaMemcpyHostToDevice));
    free(h);
    int *p = (int *)malloc((size_t)n * K * 4);
    srand(7);
    if (const int E = getenv("EC_EXPERTS") ? atoi(getenv("EC_EXPERTS")) : 0) {
      /* the dispatch's expert layout: each token K distinct experts of E at random, rows in (expert, token) order */
      int *e = (int *)malloc((size_t)n * K * 4), *cnt = (int *)calloc(E + 1, 4);
      for (int t = 0; t < n; t++) {
        draw_experts(e + (size_t)t * K, K, E);
        for (int k = 0; k < K; k++) cnt[e[t * K + k] + 1]++;
      }
      for (int x = 0; x < E; x++) cnt[x + 1] += cnt[x];
      for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++) p[t * K + k] = cnt[e[t * K + k]]++;
      free(e), free(cnt);
    } else {
      for (int i = 0; i < n * K; i++) p[i] = i;
      for (int i = n * K - 1; i > 0; i--) {
        const int j = rand() % (i + 1), x = p[i];
        p[i] = p[j], p[j] = x;
      }
    }
    CK(cudaMemcpy(dst, p, (size_t)n * K * 4, cudaMemcpyHostToDevice));
    char *o = (char *)malloc(out_bytes);
    char *hin = (char *)malloc(in_bytes);
    CK(cudaMemcpy(hin, in, in_bytes, cudaMemcpyDeviceToHost));
    for (int t = 0; t < n; t++)
      for (int k = 0; k < K; k++) memcpy(o + (size_t)p[t * K + k] * bytes, hin + (size_t)t * bytes, bytes);
    CK(cudaMemcpy(ref, o, out_bytes, cudaMemcpyHostToDevice));
    free(o), free(hin), free(p);
  }
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaFuncSetAttribute(k_tma, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
  auto timeit = [&](auto &&launch) { return best_us(st, e0, e1, launch); };
  auto check = [&]() {
    static char *a = (char *)malloc(out_bytes), *b = (char *)malloc(out_bytes);
    CK(cudaMemcpy(a, out, out_bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b, ref, out_bytes, cudaMemcpyDeviceToHost));
    return memcmp(a, b, out_bytes) == 0;
  };
  const double rw = (double)out_bytes + (double)in_bytes;
  const float copy = timeit([&] { CK(cudaMemcpyAsync(out, ref, out_bytes, cudaMemcpyDeviceToDevice, st)); });
  printf("tokens %d, row %d B, K %d: output %.1f MiB; copy of the output %.1f us (%.0f GB/s read + write)\n", n, bytes,
         K, out_bytes / 1048576.0, copy, 2.0 * out_bytes / copy / 1e3);
  printf("%-6s %5s %3s %3s %10s %12s %12s %s\n", "kind", "SMs", "P", "S", "us", "GB/s r+w", "GB/s/SM", "ok");
  if (getenv("EC_SCALES")) { /* the FP8 rows' scales beside the rows (bytes = 7168 for the dispatch's FP8 rows) */
    const int groups = bytes / 128, rows = n * K;
    float *isc, *osc;
    CK(cudaMalloc(&isc, (size_t)n * groups * 4));
    CK(cudaMalloc(&osc, (size_t)rows * groups * 4));
    float *tmp;
    CK(cudaMalloc(&tmp, (size_t)rows * groups * 4));
    float *h = (float *)malloc((size_t)n * groups * 4), *ho = (float *)malloc((size_t)rows * groups * 4);
    int *hd = (int *)malloc((size_t)n * K * 4);
    for (int i = 0; i < n * groups; i++) h[i] = 1.0f + (float)i;
    CK(cudaMemcpy(isc, h, (size_t)n * groups * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(hd, dst, (size_t)n * K * 4, cudaMemcpyDeviceToHost));
    for (int sms : {16, 132}) {
      CK(cudaMemsetAsync(out, 0, out_bytes, st));
      const float plain = timeit([&] { k_regs<<<sms, 512, 0, st>>>(in, out, dst, n, bytes, K, 0); });
      printf("%-14s %5d %10.1f us %12.1f GB/s r+w %s\n", "rows", sms, plain, rw / plain / 1e3, check() ? "yes" : "NO");
      static const char *name[6] = {"+scales r-major",         "+scales g-major",  "+g-major L2last",
                                    "+g-major L2last rows.cs", "+g-major rows.cs", "+r-major +transpose"};
      for (int mode : {1, 0, 2, 3, 4, 5}) {
        CK(cudaMemsetAsync(out, 0, out_bytes, st));
        CK(cudaMemsetAsync(osc, 0, (size_t)rows * groups * 4, st));
        const float us = timeit([&] {
          k_regs_scales<<<sms, 512, 0, st>>>(in, isc, out, mode == 5 ? tmp : osc, dst, n, bytes, K, rows, mode);
          if (mode == 5)
            k_transpose<<<dim3((rows + 31) / 32, (groups + 31) / 32), dim3(32, 8), 0, st>>>(tmp, osc, rows, groups);
        });
        CK(cudaMemcpy(ho, osc, (size_t)rows * groups * 4, cudaMemcpyDeviceToHost));
        const bool g_major = mode != 0;
        bool ok = check();
        for (int t = 0; t < n && ok; t++)
          for (int k = 0; k < K && ok; k++)
            for (int g = 0; g < groups && ok; g++) {
              const int r = hd[t * K + k];
              ok = ho[g_major ? (size_t)g * rows + r : (size_t)r * groups + g] == h[(size_t)t * groups + g];
            }
        printf("%-24s %5d %10.1f us (+%.1f) %s\n", name[mode], sms, us, us - plain, ok ? "yes" : "NO");
      }
    }
    return 0;
  }
  if (getenv("EC_OCCUPANCY")) { /* regs on every SM with 1-4 blocks of 16 warps an SM (the dispatch has one) */
    int dev_sms = 0;
    CK(cudaDeviceGetAttribute(&dev_sms, cudaDevAttrMultiProcessorCount, 0));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, k_regs));
    printf("k_regs: %d registers a thread\n", fa.numRegs);
    for (int m = 1; m <= 4; m++) {
      CK(cudaMemsetAsync(out, 0, out_bytes, st));
      const float us = timeit([&] { k_regs<<<dev_sms * m, 512, 0, st>>>(in, out, dst, n, bytes, K, 0); });
      printf("%-6s %5d x %d blocks %10.1f us %12.1f GB/s r+w %s\n", "regs", dev_sms, m, us, rw / us / 1e3,
             check() ? "yes" : "NO");
    }
    return 0;
  }
  for (int sms : {16, 24, 32, 132}) {
    for (int wo = 0; wo < 2; wo++) {
      CK(cudaMemsetAsync(out, 0, out_bytes, st));
      const float us = timeit([&] { k_regs<<<sms, 512, 0, st>>>(in, out, dst, n, bytes, K, wo); });
      const double b = wo ? (double)out_bytes : rw;
      printf("%-6s %5d %3s %3s %10.1f %12.1f %12.2f %s\n", wo ? "wregs" : "regs", sms, "-", "-", us, b / us / 1e3,
             b / us / 1e3 / sms,
             wo        ? "-"
             : check() ? "yes"
                       : "NO");
    }
    const int cfg[][2] = {{1, 14}, {2, 7}, {4, 3}, {7, 2}}; /* S >= 2: a stage is reloaded one token late */
    for (auto &c : cfg) {
      const int P = c[0], S = c[1];
      const size_t smem = (size_t)P * S * bytes;
      if (smem > 220 * 1024 || P * S > 64) continue;
      for (int wo = 0; wo < 2; wo++) {
        CK(cudaMemsetAsync(out, 0, out_bytes, st));
        const float us = timeit([&] { k_tma<<<sms, P * 32, smem, st>>>(in, out, dst, n, bytes, K, P, S, wo); });
        const double b = wo ? (double)out_bytes : rw;
        printf("%-6s %5d %3d %3d %10.1f %12.1f %12.2f %s\n", wo ? "wtma" : "tma", sms, P, S, us, b / us / 1e3,
               b / us / 1e3 / sms,
               wo        ? "-"
               : check() ? "yes"
                         : "NO");
      }
    }
  }
  return 0;
}
