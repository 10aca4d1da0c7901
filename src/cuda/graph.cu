/*
 * graph.cu — the cuda side of the graph cache (src/exec/graph_cache.c): capture a step, instantiate, update in
 * place, launch.
 */
#include "cuda/backend.h"
#include "exec/graph.h"

using namespace sy;

extern "C" sy_status_t sy__cuda_stream_capturing(cudaStream_t stream, int *capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  *capturing = status != cudaStreamCaptureStatusNone;
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_graph_capture(cudaStream_t stream, sy_graph_step_fn step, void *user, int bucket,
                                              void **graph) {
  *graph = nullptr;
  SY_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const sy_status_t st = step(user, bucket, stream);
  cudaGraph_t g = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream, &g); /* always: the stream leaves capture mode */
  if (st != SY_SUCCESS || err != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    if (st != SY_SUCCESS) {
      (void)cudaGetLastError();
      return st;
    }
    return cuda_error(err, "cudaStreamEndCapture (the step did something a capture cannot hold?)", __FILE__, __LINE__);
  }
  *graph = g;
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_graph_instantiate(void *graph, void **exec) {
  cudaGraphExec_t e = nullptr;
  SY_CUDA_CHECK(cudaGraphInstantiateWithFlags(&e, (cudaGraph_t)graph, 0));
  *exec = e;
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_graph_update(void *exec, void *graph, int *updated) {
  cudaGraphExecUpdateResultInfo info;
  const cudaError_t err = cudaGraphExecUpdate((cudaGraphExec_t)exec, (cudaGraph_t)graph, &info);
  *updated = err == cudaSuccess;
  if (err != cudaSuccess) (void)cudaGetLastError(); /* refused: the caller instantiates anew */
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_graph_launch(void *exec, cudaStream_t stream) {
  SY_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, stream));
  return SY_SUCCESS;
}

extern "C" void sy__cuda_graph_destroy(void *graph, void *exec) {
  if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
  if (graph) cudaGraphDestroy((cudaGraph_t)graph);
}
