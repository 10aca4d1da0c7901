/*
 * test_gpu_init.c — communicator bring-up on the GPUs syrun gives: init, rank/size/device, peer
 * reachability (every pair of our machines is NVLink-connected, so every peer must be load/store reachable
 * unless SY_FORCE_PUT), barriers, the host allgather, symmetric allocation, and init/destroy twice in one
 * process (NVSHMEM finalised and brought up again), and a malformed SY_PIECE_ORDER refused by init on every rank.
 */
#include "gpu_test.h"

int main(void) {
  gt_require_gpu("test_gpu_init");
  const char *force = getenv("SY_FORCE_PUT");
  int forced = force && *force && strcmp(force, "0");
  for (int round = 0; round < 2; round++) {
    sy_comm_t comm = NULL;
    double t0 = gt_now_s();
    GT_OK(sy_comm_init(&comm, NULL));
    double t_init = gt_now_s() - t0;
    int rank = -1, world = 0, device = -2;
    sy_backend_t backend;
    GT_OK(sy_comm_rank(comm, &rank));
    GT_OK(sy_comm_size(comm, &world));
    GT_OK(sy_comm_device(comm, &device));
    GT_OK(sy_comm_backend(comm, &backend));
    gt_rank = rank;
    GT_CHECK(backend == SY_BACKEND_CUDA);
    GT_CHECK(rank >= 0 && rank < world);
    int current = -1;
    GT_CUDA(cudaGetDevice(&current));
    GT_CHECK(device == current);
    const char *env_world = getenv("SY_WORLD_SIZE");
    if (env_world) GT_CHECK(world == atoi(env_world));

    /* host allgather: every rank's (rank, device) in rank order */
    int mine[2] = {rank, device};
    int *all = (int *)calloc(2 * (size_t)world, sizeof(int));
    GT_OK(sy_comm_allgather_host(comm, mine, all, sizeof mine));
    for (int p = 0; p < world; p++) GT_CHECK(all[2 * p] == p);
    /* syrun gives each rank its own GPU unless --gpus says otherwise (ranks sharing a GPU, time-sliced: the
     * multi-rank tests' correctness mode on a one-GPU machine); either way the rank sits on SY_DEVICE */
    const char *env_device = getenv("SY_DEVICE");
    if (env_device && atoi(env_device) >= 0) GT_CHECK(device == atoi(env_device));
    const char *shared = getenv("SY_TEST_SHARED_GPU");
    if (!(shared && *shared && strcmp(shared, "0")))
      for (int p = 0; p < world; p++)
        for (int q = p + 1; q < world; q++)
          if (all[2 * p + 1] == all[2 * q + 1]) GT_FAIL("ranks %d and %d share device %d", p, q, all[2 * p + 1]);
    free(all);

    void *buf = NULL;
    GT_OK(sy_mem_alloc(comm, 1 << 20, &buf));
    GT_CHECK(((uintptr_t)buf & 255) == 0);
    for (int p = 0; p < world; p++) {
      void *peer = NULL;
      GT_OK(sy_comm_peer_ptr(comm, (char *)buf + 4096, p, &peer));
      if (p == rank) GT_CHECK(peer == (char *)buf + 4096);
      else if (forced) GT_CHECK(peer == NULL);
      else if (!peer) GT_FAIL("peer %d is not load/store reachable (every pair is NVLink-connected here)", p);
    }
    GT_CHECK(sy_comm_peer_ptr(comm, buf, world, &(void *){0}) == SY_ERR_INVALID_ARG);

    cudaStream_t stream;
    GT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    t0 = gt_now_s();
    for (int i = 0; i < 100; i++) GT_OK(sy_comm_barrier(comm, stream));
    GT_CUDA(cudaStreamSynchronize(stream));
    double t_bar = (gt_now_s() - t0) / 100;
    sy_status_t async = SY_ERR_INTERNAL;
    GT_OK(sy_comm_async_error(comm, &async, NULL, 0));
    GT_CHECK(async == SY_SUCCESS);
    GT_OK(sy_mem_free(comm, buf));
    GT_CUDA(cudaStreamDestroy(stream));
    GT_OK(sy_comm_destroy(comm));
    if (rank == 0)
      printf("round %d: world %d, init %.1f ms, barrier %.1f us each (host-observed, 100 back to back)\n", round, world,
             t_init * 1e3, t_bar * 1e6);
  }
  /* A malformed SY_PIECE_ORDER: every rank's init refuses it before any rendezvous, and returns no communicator
   * (NULL in *comm). */
  const char *order = getenv("SY_PIECE_ORDER");
  char saved[64] = "";
  if (order) snprintf(saved, sizeof saved, "%s", order);
  setenv("SY_PIECE_ORDER", "sideways", 1);
  sy_comm_t bad = (sy_comm_t)&saved; /* overwritten with NULL */
  const sy_status_t refused = sy_comm_init(&bad, NULL);
  if (refused != SY_ERR_INVALID_ARG)
    GT_FAIL("SY_PIECE_ORDER=sideways: sy_comm_init returned %s", sy_status_name(refused));
  GT_CHECK(bad == NULL);
  if (order) setenv("SY_PIECE_ORDER", saved, 1);
  else unsetenv("SY_PIECE_ORDER");
  return gt_finish("test_gpu_init");
}
