/*
 * graph.h — the graph cache's backend entry points: src/exec/graph_cache.c keeps the public calls, the buckets
 * and the counts, and calls the cuda backend (src/cuda/graph.cu; src/cuda/absent.c without it) to capture,
 * instantiate, update and launch.
 */
#ifndef SY_EXEC_GRAPH_H
#define SY_EXEC_GRAPH_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether `stream` is capturing a graph now (*capturing), or a CUDA error. */
sy_status_t sy__cuda_stream_capturing(cudaStream_t stream, int *capturing);
/* step(user, bucket, stream) captured on `stream` (thread-local mode) into *graph; the capture is ended even
 * when the step fails (then *graph is NULL and the step's status returned). */
sy_status_t sy__cuda_graph_capture(cudaStream_t stream, sy_graph_step_fn step, void *user, int bucket, void **graph);
sy_status_t sy__cuda_graph_instantiate(void *graph, void **exec);
/* exec updated from graph in place: *updated 1, or 0 where CUDA refuses (a changed topology). */
sy_status_t sy__cuda_graph_update(void *exec, void *graph, int *updated);
sy_status_t sy__cuda_graph_launch(void *exec, cudaStream_t stream);
void sy__cuda_graph_destroy(void *graph, void *exec);

#ifdef __cplusplus
}
#endif

#endif /* SY_EXEC_GRAPH_H */
