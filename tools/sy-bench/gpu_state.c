/*
 * gpu_state.c — what held this rank's GPU below its clock while an entry ran: NVML's counters of the time the GPU
 * spent slowed by its power limit and by its temperature (nvmlDeviceGetViolationStatus), read before and after, and
 * its temperature at both ends. The driver's libnvidia-ml.so.1 is opened at run time, so building needs no NVML and
 * a machine without it (the CI's) reads nothing. A GPU slowed by its temperature is not running at its speed, and a
 * world's rows are its slowest rank's (bench/NOTES.md, "measuring"); slowed by its power limit is the normal state of
 * a busy H100.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench.h"

/* The few NVML declarations used here, as nvml.h has them (the CUDA toolkit does not ship the header). */
typedef int nvml_return_t; /* 0: NVML_SUCCESS */
typedef void *nvml_device_t;
typedef struct {
  unsigned long long reference_time; /* us since the epoch */
  unsigned long long violation_time; /* ns slowed, since the driver loaded */
} nvml_violation_t;
enum { NVML_POLICY_POWER = 0, NVML_POLICY_THERMAL = 1, NVML_TEMPERATURE_GPU = 0 };

int bench_gpu_state(int device, bench_gpu_state_t *out) {
  memset(out, 0, sizeof *out);
  char bus[32];
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) return 1;
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 1;
  nvml_return_t (*init)(void) = (nvml_return_t(*)(void))dlsym(lib, "nvmlInit_v2");
  nvml_return_t (*shutdown)(void) = (nvml_return_t(*)(void))dlsym(lib, "nvmlShutdown");
  nvml_return_t (*by_bus)(const char *, nvml_device_t *) =
      (nvml_return_t(*)(const char *, nvml_device_t *))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
  nvml_return_t (*violation)(nvml_device_t, int, nvml_violation_t *) =
      (nvml_return_t(*)(nvml_device_t, int, nvml_violation_t *))dlsym(lib, "nvmlDeviceGetViolationStatus");
  nvml_return_t (*temperature)(nvml_device_t, int, unsigned *) =
      (nvml_return_t(*)(nvml_device_t, int, unsigned *))dlsym(lib, "nvmlDeviceGetTemperature");
  int rc = 1;
  if (init && shutdown && by_bus && violation && temperature && init() == 0) {
    nvml_device_t dev;
    nvml_violation_t power, thermal;
    unsigned temp = 0;
    if (by_bus(bus, &dev) == 0 && violation(dev, NVML_POLICY_POWER, &power) == 0 &&
        violation(dev, NVML_POLICY_THERMAL, &thermal) == 0 && temperature(dev, NVML_TEMPERATURE_GPU, &temp) == 0) {
      out->valid = 1, out->power_ns = power.violation_time, out->thermal_ns = thermal.violation_time;
      out->temp_c = temp;
      rc = 0;
    }
    shutdown();
  }
  dlclose(lib);
  return rc;
}

void bench_gpu_state_report(bench_ctx_t *ctx, const bench_gpu_state_t *before) {
  bench_gpu_state_t after;
  int dev = 0;
  const int have = ctx->backend == SY_BACKEND_CUDA && before->valid && sy_comm_device(ctx->comm, &dev) == SY_SUCCESS &&
                   bench_gpu_state(dev, &after) == 0 && after.valid;
  /* every rank takes part in the reductions, whether it could read its GPU or not */
  const long long thermal_ms = have ? (long long)((after.thermal_ns - before->thermal_ns) / 1000000) : -1;
  const long long power_ms = have ? (long long)((after.power_ns - before->power_ns) / 1000000) : -1;
  const long long hottest = have ? (long long)(after.temp_c > before->temp_c ? after.temp_c : before->temp_c) : -1;
  const long long most_thermal = bench_allreduce_max(ctx, thermal_ms), most_power = bench_allreduce_max(ctx, power_ms),
                  most_temp = bench_allreduce_max(ctx, hottest);
  if (ctx->backend != SY_BACKEND_CUDA) return;
  if (most_temp < 0) {
    bench_print(ctx, "# GPU slowdowns: not read (NVML absent, or its counters not supported here)\n");
    return;
  }
  bench_print(ctx,
              "# GPU slowdowns during this entry (NVML, the most on any rank): %lld ms by the power limit, %lld ms by "
              "temperature; the hottest GPU at the entry's start or end %lld C\n",
              most_power, most_thermal, most_temp);
  if (thermal_ms > 0)
    fprintf(stderr,
            "sy-bench: WARNING: rank %d's GPU was slowed by its temperature for %lld ms during this entry (%u C at "
            "its end): its figures, and every row that takes the slowest rank's, are not its speed\n",
            ctx->rank, thermal_ms, after.temp_c);
  bench_json(ctx,
             "{\"entry\": \"gpu_slowdown\", \"of\": \"%s\", \"world\": %d, \"power_ms\": %lld, \"thermal_ms\": %lld, "
             "\"hottest_c\": %lld}",
             ctx->opts->entry, ctx->world, most_power, most_thermal, most_temp);
}
