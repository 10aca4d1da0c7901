/*
 * stream.c — the streams the library accepts: every call that enqueues GPU work takes the caller's stream and
 * never the legacy default stream (NULL), which would serialise against every other stream of the device.
 */
#include "core/internal.h"

sy_status_t sy__check_stream(sy_comm_t comm, cudaStream_t stream, const char *fn) {
  SY_ARG_CHECK(comm->backend != SY_BACKEND_CUDA || (stream != NULL && stream != cudaStreamLegacy), fn,
               "stream is %s (the legacy default stream); pass a stream you created",
               stream ? "cudaStreamLegacy" : "NULL");
  return SY_SUCCESS;
}
