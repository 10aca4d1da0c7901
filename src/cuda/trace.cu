/*
 * trace.cu — the host side of the per-phase device trace: with SY_TRACE_FILE set, init reserves a buffer of
 * SY_TRACE_EVENTS events that kernels append to (device.cuh: trace()), and destroy writes it as Chrome trace
 * JSON (open in Perfetto or chrome://tracing): one process per rank, one thread per block, B/E pairs per
 * phase with the call number and peer as arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/backend.h"

namespace sy {

const char *phase_name(int phase) {
  switch (phase) {
#define SY_CUDA_OP(id, trace_name, detail)
#define SY_CUDA_PHASE(id, trace_name) \
  case id:                            \
    return trace_name;
#include "cuda/op_list.h"
#undef SY_CUDA_OP
#undef SY_CUDA_PHASE
    default: return "phase";
  }
}

const char *op_trace(int op) {
  switch (op) {
#define SY_CUDA_OP(id, trace_name, detail) \
  case id:                                 \
    return trace_name;
#define SY_CUDA_PHASE(id, trace_name)
#include "cuda/op_list.h"
#undef SY_CUDA_OP
#undef SY_CUDA_PHASE
    default: return "op";
  }
}

sy_status_t trace_init(cuda_state *st, int rank) {
  const char *pattern = sy__env_str(SY_ENVID_SY_TRACE_FILE);
  if (!pattern || !*pattern) return SY_SUCCESS;
  long long cap = 0;
  SY_CHECK(sy__env_int(SY_ENVID_SY_TRACE_EVENTS, &cap));
  if (cap <= 0 || cap > (1ll << 26)) {
    SY_WARN("SY_TRACE_EVENTS=%lld must be in [1, %lld]", cap, 1ll << 26);
    return SY_ERR_INVALID_ARG;
  }
  size_t n = 0; /* expand %r and %p */
  for (const char *p = pattern; *p && n + 16 < sizeof st->trace_path; p++) {
    if (p[0] == '%' && p[1] == 'r') n += (size_t)snprintf(st->trace_path + n, 16, "%d", rank), p++;
    else if (p[0] == '%' && p[1] == 'p') n += (size_t)snprintf(st->trace_path + n, 16, "%d", (int)getpid()), p++;
    else st->trace_path[n++] = *p;
  }
  st->trace_path[n] = '\0';
  SY_CUDA_CHECK(cudaMalloc((void **)&st->ctx.trace, (size_t)cap * sizeof(trace_event)));
  st->ctx.trace_cap = (uint32_t)cap;
  SY_INFO("tracing %lld events into %s", cap, st->trace_path);
  return SY_SUCCESS;
}

static int by_time(const void *a, const void *b) {
  const trace_event *x = (const trace_event *)a, *y = (const trace_event *)b;
  return x->t_ns < y->t_ns ? -1 : x->t_ns > y->t_ns;
}

void trace_finish(cuda_state *st) {
  if (!st->ctx.trace) return;
  unsigned count = 0;
  trace_event *events = NULL;
  if (cudaMemcpy(&count, &st->ctx.state->trace_next, sizeof count, cudaMemcpyDeviceToHost) == cudaSuccess) {
    if (count > st->ctx.trace_cap) {
      SY_WARN("trace: %u events, %u kept (raise SY_TRACE_EVENTS)", count, st->ctx.trace_cap);
      count = st->ctx.trace_cap;
    }
    events = (trace_event *)malloc((size_t)count * sizeof *events + 1);
    if (events &&
        cudaMemcpy(events, st->ctx.trace, (size_t)count * sizeof *events, cudaMemcpyDeviceToHost) != cudaSuccess)
      count = 0;
  }
  FILE *f = events ? fopen(st->trace_path, "w") : NULL;
  if (!f) {
    SY_WARN("trace: cannot write %s", st->trace_path);
  } else {
    qsort(events, count, sizeof *events, by_time);
    const uint64_t t0 = count ? events[0].t_ns : 0;
    fprintf(f, "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n");
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}",
            st->ctx.rank, st->ctx.rank);
    for (unsigned i = 0; i < count; i++) {
      const trace_event *e = &events[i];
      fprintf(f,
              ",\n{\"name\": \"%s %s\", \"ph\": \"%s\", \"ts\": %.3f, \"pid\": %d, \"tid\": %u, "
              "\"args\": {\"call\": %u, \"peer\": %d}}",
              op_trace(e->op), phase_name(e->phase), e->begin ? "B" : "E", (e->t_ns - t0) / 1e3, st->ctx.rank, e->block,
              e->call, e->peer);
    }
    fprintf(f, "\n]}\n");
    fclose(f);
    SY_INFO("trace: %u events written to %s", count, st->trace_path);
  }
  free(events);
  cudaFree(st->ctx.trace);
  st->ctx.trace = NULL;
}

} // namespace sy
