/*
 * attn_plan.cu — an attention plan's upload to the GPU (sy_attn_plan_create's backend half): the send lists of
 * every direction, the sequences' starts and the KV destinations, packed into one device allocation (attn.cuh)
 * that the kernel in attn.cu reads.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/attn.cuh"
#include "cuda/backend.h"

using namespace sy;

static void plan_device_free(void *device) {
  attn_plan_dev *d = (attn_plan_dev *)device;
  if (!d) return;
  cudaFree(d->blob);
  free(d);
}

extern "C" sy_status_t sy__cuda_attn_plan_upload(sy_comm_t comm, struct sy_attn_plan *plan) {
  const int W = plan->world_size, C = plan->max_replicas;
  /* Layout of the blob (int64 units unless noted): per direction send_start[W+1], send_rows[W], recv_rows[W],
   * segs[4 n]; then seq_start[num_seqs + 1]; then kv_dst (int32). */
  size_t words = 0;
  for (int d = 0; d < SY_ATTN_DIRS; d++) {
    const sy_attn_dir_t *dir = &plan->dir[d];
    words += (size_t)(W + 1) + 2 * (size_t)W + 4 * (size_t)dir->send_start[W];
  }
  words += (size_t)plan->num_seqs + 1;
  const size_t kv_count = (size_t)plan->num_seqs * (size_t)(C > 0 ? C : 0);
  const size_t bytes = words * sizeof(int64_t) + kv_count * sizeof(int) + 16;
  int64_t *host = (int64_t *)malloc(bytes);
  attn_plan_dev *dev = (attn_plan_dev *)calloc(1, sizeof *dev);
  if (!host || !dev) {
    free(host);
    free(dev);
    return SY_ERR_NO_MEMORY;
  }
  cudaError_t err = cudaMalloc(&dev->blob, bytes);
  if (err != cudaSuccess) {
    free(host);
    free(dev);
    return cuda_error(err, "cudaMalloc(attention plan)", __FILE__, __LINE__);
  }
  int64_t *base = (int64_t *)dev->blob;
  size_t at = 0;
  for (int d = 0; d < SY_ATTN_DIRS; d++) {
    const sy_attn_dir_t *dir = &plan->dir[d];
    attn_dir_dev *dd = &dev->dir[d];
    dd->send_start = base + at;
    memcpy(host + at, dir->send_start, sizeof(int64_t) * (size_t)(W + 1));
    at += (size_t)W + 1;
    dd->send_rows = base + at;
    memcpy(host + at, dir->send_rows, sizeof(int64_t) * (size_t)W);
    at += (size_t)W;
    dd->recv_rows = base + at;
    memcpy(host + at, dir->recv_rows, sizeof(int64_t) * (size_t)W);
    at += (size_t)W;
    dd->segs = base + at;
    for (int p = 0; p < W; p++) {
      int64_t cum = 0;
      for (int64_t g = dir->send_start[p]; g < dir->send_start[p + 1]; g++) {
        host[at + 4 * g] = dir->send_segs[g].src_row;
        host[at + 4 * g + 1] = dir->send_segs[g].dst_row;
        host[at + 4 * g + 2] = dir->send_segs[g].rows;
        host[at + 4 * g + 3] = cum;
        cum += dir->send_segs[g].rows;
      }
    }
    at += 4 * (size_t)dir->send_start[W];
  }
  dev->seq_start = base + at;
  memcpy(host + at, plan->seq_start, sizeof(int64_t) * ((size_t)plan->num_seqs + 1));
  at += (size_t)plan->num_seqs + 1;
  dev->kv_dst = (const int *)(base + at);
  for (size_t i = 0; i < kv_count; i++) ((int *)(host + at))[i] = plan->kv_send[i].dst_rank;
  err = cudaMemcpy(dev->blob, host, bytes, cudaMemcpyHostToDevice);
  free(host);
  if (err != cudaSuccess) {
    cudaFree(dev->blob);
    free(dev);
    return cuda_error(err, "cudaMemcpy(attention plan)", __FILE__, __LINE__);
  }
  plan->device = dev;
  plan->device_free = plan_device_free;
  return SY_SUCCESS;
}
