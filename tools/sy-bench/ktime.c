/*
 * ktime.c — kernel time for sy-bench: the device timestamps of every kernel a call launches, from CUPTI's
 * activity records (what nsys and the PyTorch profiler report as kernel time), for our operations and NCCL's
 * alike. CUPTI is loaded at run time (dlopen), so sy-bench builds and runs where it is absent; then the kernel
 * columns read "-" and the JSON says null.
 *
 * A timed pass brackets each call with an external correlation id (the call's index): CUPTI ties every API
 * call made in the bracket, and so every kernel launched, to that id; kspan.h turns each call's kernel
 * timestamps into the device time it held alone. Event-timed figures also carry the launch path (a kernel's
 * start after the event before it); this does not.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kspan.h"

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define BENCH_HAVE_CUPTI_HEADERS 1
#else
#define BENCH_HAVE_CUPTI_HEADERS 0
#endif

#ifndef SY_CUDA_LIBDIR
#define SY_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

#if BENCH_HAVE_CUPTI_HEADERS

typedef struct kernel_rec {
  uint32_t correlation, stream, grid, block, smem;
  uint64_t start, end;
  char name[48]; /* the start of the (mangled) name: for SY_BENCH_TIMELINE */
} kernel_rec_t;

typedef struct ext_rec {
  uint32_t correlation;
  uint64_t id;
} ext_rec_t;

static struct {
  int state; /* 0: not tried, 1: usable, -1: unavailable */
  char why[256];
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
  CUptiResult (*push)(CUpti_ExternalCorrelationKind, uint64_t);
  CUptiResult (*pop)(CUpti_ExternalCorrelationKind, uint64_t *);
  pthread_mutex_t lock;
  kernel_rec_t *kernels;
  size_t num_kernels, cap_kernels;
  ext_rec_t *exts;
  size_t num_exts, cap_exts;
  size_t dropped;
} kt = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const CUpti_ActivityKind kt_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
                                              CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
#define KT_NUM_KINDS    (sizeof kt_kinds / sizeof kt_kinds[0])
#define KT_BUFFER_BYTES ((size_t)4 << 20)

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = aligned_alloc(8, KT_BUFFER_BYTES);
  *size = *buffer ? KT_BUFFER_BYTES : 0;
  *max_records = 0;
}

static int grow(void **array, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t n = *cap ? 2 * *cap : 4096;
  while (n < need) n *= 2;
  void *p = realloc(*array, n * elem);
  if (!p) return 1;
  *array = p, *cap = n;
  return 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  CUpti_Activity *r = NULL;
  pthread_mutex_lock(&kt.lock);
  while (valid && kt.next_record(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
      if (grow((void **)&kt.kernels, &kt.cap_kernels, kt.num_kernels + 1, sizeof *kt.kernels)) kt.dropped++;
      else {
        kernel_rec_t *o = &kt.kernels[kt.num_kernels++];
        *o = (kernel_rec_t){k->correlationId,
                            k->streamId,
                            k->gridX * k->gridY * k->gridZ,
                            k->blockX * k->blockY * k->blockZ,
                            (uint32_t)k->dynamicSharedMemory + k->staticSharedMemory,
                            k->start,
                            k->end,
                            {0}};
        if (k->name) strncpy(o->name, k->name, sizeof o->name - 1);
      }
    } else if (r->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const CUpti_ActivityExternalCorrelation *e = (const CUpti_ActivityExternalCorrelation *)r;
      if (e->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) continue;
      if (grow((void **)&kt.exts, &kt.cap_exts, kt.num_exts + 1, sizeof *kt.exts)) kt.dropped++;
      else kt.exts[kt.num_exts++] = (ext_rec_t){e->correlationId, e->externalId};
    }
  }
  pthread_mutex_unlock(&kt.lock);
  free(buffer);
}

static void *open_cupti(void) {
  const char *env = getenv("SY_BENCH_CUPTI");
  const char *names[] = {env,
                         "libcupti.so.13",
                         "libcupti.so",
                         SY_CUDA_LIBDIR "/libcupti.so.13",
                         SY_CUDA_LIBDIR "/../extras/CUPTI/lib64/libcupti.so.13",
                         "/usr/local/cuda/lib64/libcupti.so.13",
                         "/usr/local/cuda/lib/libcupti.so.13",
                         "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!names[i] || !*names[i]) continue;
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

int bench_ktime_available(const char **why) {
  if (kt.state == 0) {
    kt.state = -1;
    void *h = getenv("SY_BENCH_NO_CUPTI") ? NULL : open_cupti();
    if (!h) {
      snprintf(kt.why, sizeof kt.why, "%s",
               getenv("SY_BENCH_NO_CUPTI") ? "SY_BENCH_NO_CUPTI is set" : "libcupti not found (SY_BENCH_CUPTI=PATH)");
    } else {
      *(void **)&kt.enable = dlsym(h, "cuptiActivityEnable");
      *(void **)&kt.disable = dlsym(h, "cuptiActivityDisable");
      *(void **)&kt.register_callbacks = dlsym(h, "cuptiActivityRegisterCallbacks");
      *(void **)&kt.flush_all = dlsym(h, "cuptiActivityFlushAll");
      *(void **)&kt.next_record = dlsym(h, "cuptiActivityGetNextRecord");
      *(void **)&kt.push = dlsym(h, "cuptiActivityPushExternalCorrelationId");
      *(void **)&kt.pop = dlsym(h, "cuptiActivityPopExternalCorrelationId");
      if (!kt.enable || !kt.disable || !kt.register_callbacks || !kt.flush_all || !kt.next_record || !kt.push ||
          !kt.pop)
        snprintf(kt.why, sizeof kt.why, "libcupti lacks the activity API");
      else if (kt.register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS)
        snprintf(kt.why, sizeof kt.why, "cuptiActivityRegisterCallbacks failed (another profiler attached?)");
      else kt.state = 1;
    }
  }
  if (why) *why = kt.state == 1 ? "" : kt.why;
  return kt.state == 1;
}

int bench_ktime_begin(void) {
  if (!bench_ktime_available(NULL)) return 1;
  pthread_mutex_lock(&kt.lock);
  kt.num_kernels = kt.num_exts = kt.dropped = 0;
  pthread_mutex_unlock(&kt.lock);
  for (size_t i = 0; i < KT_NUM_KINDS; i++)
    if (kt.enable(kt_kinds[i]) != CUPTI_SUCCESS) {
      for (size_t j = 0; j < i; j++) kt.disable(kt_kinds[j]);
      return 1;
    }
  return 0;
}

void bench_ktime_push(uint64_t call) {
  if (kt.state == 1) kt.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, call);
}

void bench_ktime_pop(void) {
  uint64_t id;
  if (kt.state == 1) kt.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
}

static int cmp_ext(const void *a, const void *b) {
  const ext_rec_t *x = a, *y = b;
  return x->correlation < y->correlation ? -1 : x->correlation > y->correlation;
}

/* SY_BENCH_TIMELINE=FILE: every kernel of the timed pass's last call appended to FILE (a block a timed pass:
 * start and end in microseconds from the call's first kernel, stream, grid, block, shared memory, name), to see
 * what ran beside what. Called with kt.lock held, kt.exts sorted. */
static void dump_timeline(const char *path, int calls) {
  char name[512];
  const char *r = strstr(path, "%r"), *rank = getenv("SY_RANK");
  if (r) snprintf(name, sizeof name, "%.*s%s%s", (int)(r - path), path, rank ? rank : "0", r + 2);
  else snprintf(name, sizeof name, "%s", path);
  FILE *f = fopen(name, "a");
  if (!f) return;
  static int pass;
  uint64_t t0 = 0;
  for (size_t i = 0; i < kt.num_kernels; i++) {
    const ext_rec_t key = {kt.kernels[i].correlation, 0};
    const ext_rec_t *e = bsearch(&key, kt.exts, kt.num_exts, sizeof *kt.exts, cmp_ext);
    if (e && e->id == (uint64_t)calls - 1 && (!t0 || kt.kernels[i].start < t0)) t0 = kt.kernels[i].start;
  }
  fprintf(f, "== timed pass %d, call %d: start_us end_us stream grid block smem name\n", pass++, calls - 1);
  for (size_t i = 0; i < kt.num_kernels; i++) {
    const kernel_rec_t *k = &kt.kernels[i];
    const ext_rec_t key = {k->correlation, 0};
    const ext_rec_t *e = bsearch(&key, kt.exts, kt.num_exts, sizeof *kt.exts, cmp_ext);
    if (!e || e->id != (uint64_t)calls - 1) continue;
    fprintf(f, "%10.2f %10.2f %4u %6u %5u %7u %s\n", (k->start - t0) / 1e3, (k->end - t0) / 1e3, k->stream, k->grid,
            k->block, k->smem, k->name);
  }
  fclose(f);
}

int bench_ktime_end(int calls, double *us) {
  if (kt.state != 1) return 1;
  kt.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (size_t i = 0; i < KT_NUM_KINDS; i++) kt.disable(kt_kinds[i]);
  uint64_t *first = calloc((size_t)calls, sizeof *first), *last = calloc((size_t)calls, sizeof *last);
  int rc = !first || !last;
  pthread_mutex_lock(&kt.lock);
  if (!rc) {
    qsort(kt.exts, kt.num_exts, sizeof *kt.exts, cmp_ext);
    for (size_t i = 0; i < kt.num_kernels; i++) {
      const kernel_rec_t *k = &kt.kernels[i];
      const ext_rec_t key = {k->correlation, 0};
      const ext_rec_t *e = bsearch(&key, kt.exts, kt.num_exts, sizeof *kt.exts, cmp_ext);
      if (!e || e->id >= (uint64_t)calls || !k->start || k->end < k->start) continue;
      if (!first[e->id] || k->start < first[e->id]) first[e->id] = k->start;
      if (k->end > last[e->id]) last[e->id] = k->end;
    }
    rc = kt.dropped != 0;
  }
  if (!rc && getenv("SY_BENCH_TIMELINE")) dump_timeline(getenv("SY_BENCH_TIMELINE"), calls);
  pthread_mutex_unlock(&kt.lock);
  if (!rc) rc = bench_kernel_spans(calls, first, last, us); /* a call with no kernel we saw: no figure */
  free(first), free(last);
  return rc;
}

#else /* no CUPTI headers at build time */

int bench_ktime_available(const char **why) {
  if (why) *why = "built without cupti_activity.h";
  return 0;
}
int bench_ktime_begin(void) { return 1; }
void bench_ktime_push(uint64_t call) {}
void bench_ktime_pop(void) {}
int bench_ktime_end(int calls, double *us) { return 1; }

#endif
