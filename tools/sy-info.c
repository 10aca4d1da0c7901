/*
 * sy-info — what this machine offers switchyard: the library version, the GPUs CUDA sees with their peer
 * reachability (load/store over NVLink or PCIe), the NVSHMEM and NCCL versions, and with -e every
 * environment variable switchyard reads (value set here, default, what it does). SY_* variables set here that
 * switchyard does not read are always listed.
 */
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

static void print_env(void) {
  int width = 0; /* the longest name's */
  for (int i = 0; i < sy__env_count(); i++) {
    const int len = (int)strlen(sy__env_def((sy_env_id_t)i)->name);
    width = len > width ? len : width;
  }
  printf("\nenvironment variables (set here / default):\n");
  for (int i = 0; i < sy__env_count(); i++) {
    const sy_env_def_t *d = sy__env_def((sy_env_id_t)i);
    const char *set = getenv(d->name);
    if (set && !strcmp(d->name, "SY_BOOT_SECRET")) set = "(set, hidden)"; /* a secret is never printed */
    printf("  %-*s %-12s default %-8s %s\n", width, d->name, set ? set : "(unset)",
           *d->default_value ? d->default_value : "\"\"", d->doc);
  }
}

/* SY_* variables set here that switchyard does not read (a mistyped name is otherwise ignored without a word), as
 * python -m switchyard.info lists them; SY_BENCH_* are sy-bench's own (sy-bench -h). */
static void print_unknown_env(void) {
  int any = 0;
  for (char **e = environ; *e; e++) {
    const char *eq = strchr(*e, '=');
    if (strncmp(*e, "SY_", 3) || !eq || !strncmp(*e, "SY_BENCH_", 9)) continue;
    int known = 0;
    for (int i = 0; i < sy__env_count() && !known; i++) {
      const char *name = sy__env_def((sy_env_id_t)i)->name;
      known = strlen(name) == (size_t)(eq - *e) && !strncmp(*e, name, (size_t)(eq - *e));
    }
    if (known) continue;
    if (!any) printf("\nunknown variables (set here, not read by switchyard: mistyped?):\n");
    any = 1;
    printf("  %.*s\n", (int)(eq - *e), *e); /* no value: it may be a mistyped SY_BOOT_SECRET's */
  }
}

static void print_gpus(void) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    printf("gpus:        none usable (%s); the host backend will run\n",
           err != cudaSuccess ? cudaGetErrorString(err) : "no device visible");
    return;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  printf("cuda:        driver %d.%d, runtime %d.%d\n", driver / 1000, (driver % 1000) / 10, runtime / 1000,
         (runtime % 1000) / 10);
  printf("gpus:        %d\n", count);
  for (int d = 0; d < count; d++) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    printf("  [%d] %s, sm_%d%d, %d SMs, %.1f GiB, pci %04x:%02x:%02x\n", d, p.name, p.major, p.minor,
           p.multiProcessorCount, p.totalGlobalMem / (double)(1ull << 30), p.pciDomainID, p.pciBusID, p.pciDeviceID);
  }
  printf("peer access (load/store) matrix, row = from, column = to:\n     ");
  for (int d = 0; d < count; d++) printf(" %3d", d);
  printf("\n");
  for (int a = 0; a < count; a++) {
    printf("  %3d", a);
    for (int b = 0; b < count; b++) {
      int ok = a == b;
      if (a != b) cudaDeviceCanAccessPeer(&ok, a, b);
      printf(" %3s", a == b ? "-" : ok ? "yes" : "no");
    }
    printf("\n");
  }
}

int main(int argc, char **argv) {
  int show_env = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-e") || !strcmp(argv[i], "--env")) show_env = 1;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: sy-info [-e]\n  -e  also list every environment variable switchyard reads\n");
      return 0;
    } else {
      fprintf(stderr, "sy-info: unknown option %s (try -h)\n", argv[i]);
      return 2;
    }
  }
  printf("switchyard:  %s (header %d, library %d)\n", sy_version(), SY_VERSION_CODE, sy_version_code());
  if (SY_NVSHMEM_LIB_DIR[0])
    printf("nvshmem:     %s (built against; host library in %s)\n", SY_NVSHMEM_BUILD_VERSION, SY_NVSHMEM_LIB_DIR);
  else printf("nvshmem:     none: built without the cuda backend (SY_CUDA_KERNELS=OFF)\n");
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)
    printf("nccl:        %d.%d.%d (loaded), %d.%d.%d (headers)\n", nccl / 10000, (nccl / 100) % 100, nccl % 100,
           NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  Dl_info info;
  if (dladdr((void *)ncclGetVersion, &info) && info.dli_fname) printf("             %s\n", info.dli_fname);
  print_gpus();
  if (show_env) print_env();
  print_unknown_env();
  return 0;
}
