/*
 * icache-probe — what a never-taken branch over inlined code costs a kernel: the same dependent work in 64
 * regions (a bar.sync each), laid out three ways — straight (no cold code), with a cold block inlined between
 * the regions (the hot path jumps over it), and with that block out of line (a __noinline__ call the hot path
 * skips). Timed inside the kernel (clock64, median over blocks: no launch overhead), after a kernel with other
 * code ("first") and right after itself ("again"). bench/NOTES.md ("Instruction fetch") has the figures and why
 * the kernels keep their cold paths out of line.
 *   build/bin/sy-icache-probe
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

namespace {

constexpr int REGIONS = 64, BLOCKS = 132, THREADS = 512;

__device__ unsigned sink;

template <int I, int N>
__device__ __noinline__ void cold_out_of_line() {
  unsigned y = threadIdx.x * 977u + (unsigned)clock();
#pragma unroll
  for (int j = 0; j < N; j++) {
    y ^= y >> ((I + j) % 11 + 2);
    y = y * (5u * I + 7u + 2u * j) + (3u * I + j);
  }
  sink = y;
}

/* COLD = 0: no cold code; > 0: a never-taken block of COLD steps inlined; < 0: the same block out of line. */
template <int I, int COLD>
__device__ __forceinline__ unsigned region(unsigned x) {
#pragma unroll
  for (int j = 0; j < 12; j++) {
    x ^= x >> ((I + j) % 13 + 3);
    x = x * (2u * I + 3u + 2u * j) + (7u * I + j + 1u);
  }
  if (COLD > 0 && x == 0x9e3779b9u + I) {
    unsigned y = threadIdx.x * 977u + (unsigned)clock();
#pragma unroll
    for (int j = 0; j < (COLD > 0 ? COLD : 1); j++) {
      y ^= y >> ((I + j) % 11 + 2);
      y = y * (5u * I + 7u + 2u * j) + (3u * I + j);
    }
    sink = y;
  }
  if (COLD < 0 && x == 0x9e3779b9u + I) cold_out_of_line<I, (COLD < 0 ? -COLD : 1)>();
  __syncthreads();
  return x;
}

template <int I, int N, int COLD>
struct chain {
  static __device__ __forceinline__ unsigned run(unsigned x) { return chain<I + 1, N, COLD>::run(region<I, COLD>(x)); }
};
template <int N, int COLD>
struct chain<N, N, COLD> {
  static __device__ __forceinline__ unsigned run(unsigned x) { return x; }
};

template <int SALT, int COLD>
__global__ void __launch_bounds__(THREADS) probe(unsigned *out, long long *cycles) {
  const long long t0 = clock64();
  const unsigned x = chain<SALT, SALT + REGIONS, COLD>::run(threadIdx.x + SALT);
  const long long t1 = clock64();
  if (x == 0xdeadbeefu) out[0] = x;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

double median_us(const long long *cycles, int khz) {
  std::vector<double> v(cycles, cycles + BLOCKS);
  std::sort(v.begin(), v.end());
  return v[BLOCKS / 2] / (khz / 1e3);
}

} // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    fprintf(stderr, "sy-icache-probe: no GPU here\n");
    return 1;
  }
  unsigned *out = nullptr;
  long long *cycles = nullptr, host[BLOCKS];
  int khz = 0;
  if (cudaMalloc(&out, 4) != cudaSuccess || cudaMalloc(&cycles, sizeof host) != cudaSuccess ||
      cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) != cudaSuccess) {
    fprintf(stderr, "sy-icache-probe: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  typedef void (*kernel_t)(unsigned *, long long *);
  const struct {
    const char *name;
    kernel_t k;
  } layouts[3] = {{"straight (no cold code)", probe<0, 0>},
                  {"cold blocks inlined between the regions", probe<0, 40>},
                  {"cold blocks out of line", probe<0, -40>}};
  printf("# %d regions of 12 dependent steps and a bar.sync, %d blocks x %d threads; median block, us\n", REGIONS,
         BLOCKS, THREADS);
  printf("%-42s %8s %8s\n", "# layout", "first", "again");
  for (const auto &l : layouts) {
    std::vector<double> first, again;
    for (int it = 0; it < 40; it++) {
      probe<1000, 0><<<BLOCKS, THREADS>>>(out, cycles); /* other code in between */
      l.k<<<BLOCKS, THREADS>>>(out, cycles);
      cudaMemcpy(host, cycles, sizeof host, cudaMemcpyDeviceToHost);
      first.push_back(median_us(host, khz));
      l.k<<<BLOCKS, THREADS>>>(out, cycles);
      cudaMemcpy(host, cycles, sizeof host, cudaMemcpyDeviceToHost);
      again.push_back(median_us(host, khz));
    }
    std::sort(first.begin(), first.end());
    std::sort(again.begin(), again.end());
    printf("%-42s %8.2f %8.2f\n", l.name, first[first.size() / 2], again[again.size() / 2]);
  }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    fprintf(stderr, "sy-icache-probe: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
