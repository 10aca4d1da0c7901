/*
 * placement.c — the placements of ranks on GPUs the cuda backend can start with (placement.h says why).
 */
#include "placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const sy_place_t *place;
  int rank;
} ranked_place;

static int same_place(const sy_place_t *a, const sy_place_t *b) {
  return strncmp(a->host, b->host, sizeof a->host) == 0 && strncmp(a->gpu, b->gpu, sizeof a->gpu) == 0;
}

/* by host, then GPU, then rank: a GPU's ranks come out together and ascending */
static int by_place(const void *x, const void *y) {
  const ranked_place *a = (const ranked_place *)x, *b = (const ranked_place *)y;
  int c = strncmp(a->place->host, b->place->host, sizeof a->place->host);
  if (c == 0) c = strncmp(a->place->gpu, b->place->gpu, sizeof a->place->gpu);
  return c != 0 ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

sy_status_t sy__placement_check(const sy_place_t *places, int world, char *why, size_t why_len) {
  if (why_len) why[0] = '\0';
  if (world <= 1) return SY_SUCCESS;
  ranked_place *order = (ranked_place *)malloc(sizeof *order * (size_t)world);
  if (!order) return SY_ERR_NO_MEMORY;
  for (int r = 0; r < world; r++) order[r].place = &places[r], order[r].rank = r;
  qsort(order, (size_t)world, sizeof *order, by_place);

  sy_status_t s = SY_SUCCESS;
  int alone = -1, shared = -1, shared_with = -1; /* a rank with a GPU to itself; two ranks sharing one */
  for (int g = 0; g < world && s == SY_SUCCESS;) {
    int e = g + 1;
    while (e < world && same_place(order[g].place, order[e].place)) e++;
    if (e - g == 1) {
      if (alone < 0) alone = order[g].rank;
    } else {
      if (shared < 0) shared = order[g].rank, shared_with = order[g + 1].rank;
      const int stride = order[g + 1].rank - order[g].rank;
      for (int i = g + 2; i < e; i++)
        if (order[i].rank - order[i - 1].rank != stride) {
          snprintf(
              why, why_len,
              "ranks %d, %d and %d share GPU %.32s on %.256s, but the ranks of one GPU must be evenly spaced (as in "
              "0,0,1,1 or 0,1,0,1): NVSHMEM cannot start otherwise",
              order[i - 2].rank, order[i - 1].rank, order[i].rank, order[g].place->gpu, order[g].place->host);
          s = SY_ERR_UNSUPPORTED;
          break;
        }
    }
    g = e;
  }
  if (s == SY_SUCCESS && alone >= 0 && shared >= 0) {
    snprintf(why, why_len,
             "ranks %d and %d share GPU %.32s on %.256s while rank %d has GPU %.32s on %.256s to itself: NVSHMEM "
             "starts only if every rank has a GPU of its own or every GPU is shared (it hangs otherwise)",
             shared, shared_with, places[shared].gpu, places[shared].host, alone, places[alone].gpu,
             places[alone].host);
    s = SY_ERR_UNSUPPORTED;
  }
  free(order);
  return s;
}
