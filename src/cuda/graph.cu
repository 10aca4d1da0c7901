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

/* SY_DEBUG=INFO: what a capture holds, by node type (a replay's host time grows with its nodes and their kinds:
 * bench/NOTES.md, "Host time of a replayed step"); TRACE: each kernel node's function. Only reads the graph. */
static void census(cudaGraph_t g) {
  if (!sy__log_enabled(SY_LOG_INFO)) return;
  size_t n = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) return (void)cudaGetLastError();
  cudaGraphNode_t *nodes = (cudaGraphNode_t *)calloc(n ? n : 1, sizeof *nodes);
  if (!nodes || cudaGraphGetNodes(g, nodes, &n) != cudaSuccess) return free(nodes), (void)cudaGetLastError();
  int kernel = 0, copy = 0, set = 0, host = 0, record = 0, wait = 0, empty = 0, other = 0;
  for (size_t i = 0; i < n; i++) {
    cudaGraphNodeType t = cudaGraphNodeTypeEmpty;
    if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess) {
      (void)cudaGetLastError();
      other++;
      continue;
    }
    switch (t) {
      case cudaGraphNodeTypeKernel: {
        kernel++;
        if (!sy__log_enabled(SY_LOG_TRACE)) break;
        cudaKernelNodeParams kp;
        const char *name = nullptr;
        if (cudaGraphKernelNodeGetParams(nodes[i], &kp) == cudaSuccess &&
            cudaFuncGetName(&name, kp.func) == cudaSuccess)
          SY_TRACE("graph node %zu: kernel %s, grid %u, block %u, %u B shared", i, name, kp.gridDim.x, kp.blockDim.x,
                   kp.sharedMemBytes);
        else { /* a kernel of another runtime (cuBLASLt's): the runtime API cannot read its node */
          (void)cudaGetLastError();
          SY_TRACE("graph node %zu: kernel (not this runtime's: a library's)", i);
        }
        break;
      }
      case cudaGraphNodeTypeMemcpy: copy++; break;
      case cudaGraphNodeTypeMemset: set++; break;
      case cudaGraphNodeTypeHost: host++; break;
      case cudaGraphNodeTypeEventRecord: record++; break;
      case cudaGraphNodeTypeWaitEvent: wait++; break;
      case cudaGraphNodeTypeEmpty: empty++; break;
      default: other++; break;
    }
  }
  size_t edges = 0;
  if (cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges) != cudaSuccess) (void)cudaGetLastError();
  SY_INFO(
      "graph captured: %zu nodes (%d kernels, %d copies, %d memsets, %d host functions, %d event records, %d "
      "event waits, %d empty, %d other), %zu edges",
      n, kernel, copy, set, host, record, wait, empty, other, edges);
  free(nodes);
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
  census(g);
  *graph = g;
  return SY_SUCCESS;
}

/* Each kernel node keeps the priority of the stream it was captured from (CUDA copies it into the node at capture),
 * but a graph runs every node at its launch stream's priority unless instantiated with
 * cudaGraphInstantiateFlagUseNodePriority. Without it a step whose communication runs on a high-priority stream
 * beside GEMMs on a low-priority one loses that order in the replay: the communication's blocks queue behind the
 * GEMMs' (bench/NOTES.md, "the graph's priorities"). SY_GRAPH_NODE_PRIORITY=0 instantiates without it. */
extern "C" sy_status_t sy__cuda_graph_instantiate(void *graph, void **exec) {
  cudaGraphExec_t e = nullptr;
  int node_priority = 1;
  SY_CHECK(sy__env_bool(SY_ENVID_SY_GRAPH_NODE_PRIORITY, &node_priority));
  const unsigned long long flags = node_priority ? cudaGraphInstantiateFlagUseNodePriority : 0;
  SY_CUDA_CHECK(cudaGraphInstantiateWithFlags(&e, (cudaGraph_t)graph, flags));
  *exec = e;
  return SY_SUCCESS;
}

/* Why CUDA refused an update (cudaGraphExecUpdateResult), for the log. */
static const char *update_result_name(cudaGraphExecUpdateResult r) {
  switch (r) {
    case cudaGraphExecUpdateErrorTopologyChanged: return "the topology changed";
    case cudaGraphExecUpdateErrorNodeTypeChanged: return "a node's type changed";
    case cudaGraphExecUpdateErrorFunctionChanged:
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange: return "a kernel node's function changed";
    case cudaGraphExecUpdateErrorParametersChanged: return "a node's parameters changed in a way it cannot take";
    case cudaGraphExecUpdateErrorNotSupported: return "a node does not support updates";
    case cudaGraphExecUpdateErrorAttributesChanged: return "a node's attributes changed (e.g. a kernel's priority)";
    default: return "an unexpected reason";
  }
}

/* In place where CUDA accepts it. A refused update (*updated = 0: the caller instantiates anew) is logged with its
 * reason at INFO (any other error at WARN). CUDA refuses a capture whose kernels' priorities changed (measured in run
 * 48, CUDA 13 on H200: a probe moved to a stream of another priority; test_gpu_graph_cache check h guards it), so an
 * exec does not replay a refresh with the old priorities. */
extern "C" sy_status_t sy__cuda_graph_update(void *exec, void *graph, int *updated) {
  cudaGraphExecUpdateResultInfo info = {};
  const cudaError_t err = cudaGraphExecUpdate((cudaGraphExec_t)exec, (cudaGraph_t)graph, &info);
  *updated = err == cudaSuccess;
  if (err == cudaErrorGraphExecUpdateFailure) /* refused: the caller instantiates anew */
    SY_INFO("graph cache: update refused (%s), instantiating anew", update_result_name(info.result));
  else if (err != cudaSuccess) /* another error: logged louder; the instantiation that follows reports it if it stays */
    SY_WARN("graph cache: cudaGraphExecUpdate failed (%s: %s), instantiating anew", cudaGetErrorName(err),
            cudaGetErrorString(err));
  if (err != cudaSuccess) (void)cudaGetLastError();
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
