/*
 * attn_plan.cu — an attention plan's upload to the GPU (sy_attn_plan_create's backend half): the send lists of
 * every direction, the sequences' starts and the KV destinations, packed into one device allocation (attn.cuh)
 * that the kernel in attn.cu reads. Stream-ordered: the allocation from a pool (sy_pool), the bytes through pinned
 * staging slots (sy_host_pool), nothing that synchronises the device.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/attn.cuh"
#include "cuda/backend.h"
#include "mem/pool.h"

using namespace sy;

/* The blob back to its pool (stream-ordered, or at once), then the plan's hold on the pool let go (the pool may
 * outlive its communicator and its creator's destroy: sy__pool_retain at the upload). */
static void plan_device_free(void *device, cudaStream_t stream) {
  attn_plan_dev *d = (attn_plan_dev *)device;
  if (!d) return;
  const sy_status_t st = stream ? sy_pool_free(d->pool, d->blob, stream) : sy__pool_free_now(d->pool, d->blob);
  if (st != SY_SUCCESS)
    SY_WARN("attention plan: its device copy could not go back to its pool (%s)", sy_status_name(st));
  (void)sy_pool_destroy(d->pool);
  free(d);
}

/* The plan's metadata as the kernel reads it, built on the host for the device blob at `base` (its pointers are
 * the device's). Layout (int64 units unless noted): per direction send_start[W+1], send_rows[W], recv_rows[W],
 * segs[4 n]; then seq_start[num_seqs + 1]; then kv_dst (int32). */
static size_t blob_bytes(const struct sy_attn_plan *plan) {
  const int W = plan->world_size, C = plan->max_replicas;
  size_t words = 0;
  for (int d = 0; d < SY_ATTN_DIRS; d++)
    words += (size_t)(W + 1) + 2 * (size_t)W + 4 * (size_t)plan->dir[d].send_start[W];
  words += (size_t)plan->num_seqs + 1;
  const size_t kv_count = (size_t)plan->num_seqs * (size_t)(C > 0 ? C : 0);
  return words * sizeof(int64_t) + kv_count * sizeof(int) + 16;
}

static void blob_fill(const struct sy_attn_plan *plan, int64_t *host, int64_t *base, attn_plan_dev *dev) {
  const int W = plan->world_size, C = plan->max_replicas;
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
  const size_t kv_count = (size_t)plan->num_seqs * (size_t)(C > 0 ? C : 0);
  for (size_t i = 0; i < kv_count; i++) ((int *)(host + at))[i] = plan->kv_send[i].dst_rank;
}

/* bytes from host to dev on `stream`, a staging slot at a time (each given back when its copy is done). */
static sy_status_t copy_staged(sy_host_pool_t staging, char *dev, const char *host, size_t bytes, cudaStream_t stream) {
  const size_t slot_bytes = sy__host_pool_slot_bytes(staging);
  for (size_t off = 0; off < bytes;) {
    const size_t n = bytes - off < slot_bytes ? bytes - off : slot_bytes;
    void *slot = nullptr;
    SY_CHECK(sy_host_pool_acquire(staging, &slot));
    memcpy(slot, host + off, n);
    const cudaError_t err = cudaMemcpyAsync(dev + off, slot, n, cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) {
      (void)sy_host_pool_release(staging, slot, nullptr); /* nothing reads it */
      return cuda_error(err, "cudaMemcpyAsync(attention plan)", __FILE__, __LINE__);
    }
    const sy_status_t st = sy_host_pool_release(staging, slot, stream);
    if (st != SY_SUCCESS) { /* a copy may still read it: the slot stays held (lost to the pool), never reused early */
      SY_WARN("attention plan upload: a staging slot could not be given back on the stream (%s); it stays held",
              sy_status_name(st));
      return st;
    }
    off += n;
  }
  return SY_SUCCESS;
}

/* The plan's upload, stream-ordered: device memory from `pool` on `stream`, the bytes through `staging`'s pinned
 * slots. pool, staging NULL: the communicator's own; stream NULL: the communicator's own stream, then waited
 * for (that stream only: no device synchronisation). */
extern "C" sy_status_t sy__cuda_attn_plan_upload(sy_comm_t comm, struct sy_attn_plan *plan, sy_pool_t pool,
                                                 sy_host_pool_t staging, cudaStream_t stream) {
  const bool own = stream == nullptr;
  if (!pool || !staging || own) {
    cuda_state *st = nullptr;
    SY_CHECK(aux_get(comm, &st));
    if (!pool) pool = st->aux_pool;
    if (!staging) staging = st->aux_staging;
    if (own) stream = st->aux_stream;
  }
  const size_t bytes = blob_bytes(plan);
  int64_t *host = (int64_t *)malloc(bytes);
  attn_plan_dev *dev = (attn_plan_dev *)calloc(1, sizeof *dev);
  sy_status_t status = host && dev ? SY_SUCCESS : SY_ERR_NO_MEMORY;
  if (status == SY_SUCCESS) status = sy_pool_alloc(pool, bytes, &dev->blob, stream);
  if (status == SY_SUCCESS) {
    dev->pool = pool;
    sy__pool_retain(pool); /* let go by plan_device_free, or below on failure */
    blob_fill(plan, host, (int64_t *)dev->blob, dev);
    status = copy_staged(staging, (char *)dev->blob, (const char *)host, bytes, stream);
    if (status == SY_SUCCESS && own) status = stream_wait(stream, comm->timeout_ms, "sy_attn_plan_create");
    if (status != SY_SUCCESS) {
      (void)sy_pool_free(pool, dev->blob, stream); /* after the copies enqueued */
      (void)sy_pool_destroy(pool);
    }
  }
  free(host);
  if (status != SY_SUCCESS) {
    free(dev);
    return status;
  }
  plan->device = dev;
  plan->device_free = plan_device_free;
  return SY_SUCCESS;
}
