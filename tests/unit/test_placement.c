/*
 * test_placement.c — the placements of ranks on GPUs the cuda backend starts with (src/core/placement.h), checked
 * before NVSHMEM starts because NVSHMEM 3.4 hangs without an error where some ranks share a GPU and others do not
 * (run 35: `syrun -n 3 --gpus 0,1,0`):
 *  - accepted: one rank, every rank on its own GPU (one host or several, any order), every GPU shared by evenly
 *    spaced ranks (0,0,0; 0,0,1,1; 0,1,0,1; 0,1,2,0,1,2), on several hosts with the same GPU ids;
 *  - refused, naming the ranks and GPUs: some ranks sharing while one is alone (0,1,0 — the hang; also with the
 *    lone rank on another host), a GPU's ranks unevenly spaced (0,0,1,0,1,1);
 *  - the reason is always NUL-terminated, also when the buffer is short; nothing is written for a zero-length one;
 *  - every placement of 1 to 6 ranks on up to 3 GPUs of one host against the rule restated by brute force.
 */
#include "check.h"
#include "core/placement.h"

#include <stdio.h>
#include <string.h>

#define MAXW 64

static sy_place_t places[MAXW];

/* rank r on host hosts[r] ("node0", ...) and GPU gpus[r] ("0000:1X:00.0") */
static sy_status_t check(int world, const int *gpus, const int *hosts, char *why, size_t why_len) {
  memset(places, 0, sizeof places);
  for (int r = 0; r < world; r++) {
    snprintf(places[r].host, sizeof places[r].host, "node%d", hosts ? hosts[r] : 0);
    snprintf(places[r].gpu, sizeof places[r].gpu, "0000:%02X:00.0", 0x18 + gpus[r]);
  }
  return sy__placement_check(places, world, why, why_len);
}

/* the rule restated: either no two ranks share a (host, GPU), or every (host, GPU) in use has >= 2 ranks, evenly
 * spaced */
static int allowed(int world, const int *gpus) {
  int count[8] = {0}, any_alone = 0, any_shared = 0;
  for (int r = 0; r < world; r++) count[gpus[r]]++;
  for (int g = 0; g < 8; g++) {
    if (count[g] == 1) any_alone = 1;
    if (count[g] >= 2) {
      any_shared = 1;
      int prev = -1, stride = -1;
      for (int r = 0; r < world; r++) {
        if (gpus[r] != g) continue;
        if (prev >= 0) {
          if (stride < 0) stride = r - prev;
          else if (r - prev != stride) return 0;
        }
        prev = r;
      }
    }
  }
  return !(any_alone && any_shared);
}

int main(void) {
  char why[384];
  /* accepted */
  CHECK_OK(check(1, (int[]){0}, NULL, why, sizeof why));
  CHECK(why[0] == '\0');
  CHECK_OK(check(4, (int[]){0, 1, 2, 3}, NULL, why, sizeof why));
  CHECK_OK(check(4, (int[]){3, 1, 0, 2}, NULL, why, sizeof why));
  CHECK_OK(check(3, (int[]){0, 0, 0}, NULL, why, sizeof why));
  CHECK_OK(check(4, (int[]){0, 0, 1, 1}, NULL, why, sizeof why));
  CHECK_OK(check(4, (int[]){0, 1, 0, 1}, NULL, why, sizeof why));
  CHECK_OK(check(6, (int[]){0, 1, 2, 0, 1, 2}, NULL, why, sizeof why));
  /* two hosts with the same GPU ids: places differ by host */
  CHECK_OK(check(8, (int[]){0, 1, 2, 3, 0, 1, 2, 3}, (int[]){0, 0, 0, 0, 1, 1, 1, 1}, why, sizeof why));
  CHECK_OK(check(4, (int[]){0, 0, 0, 0}, (int[]){0, 0, 1, 1}, why, sizeof why));

  /* refused: the placement that hangs in nvshmem's init */
  CHECK_STATUS(check(3, (int[]){0, 1, 0}, NULL, why, sizeof why), SY_ERR_UNSUPPORTED);
  CHECK(strstr(why, "ranks 0 and 2 share GPU 0000:18:00.0 on node0 while rank 1 has GPU 0000:19:00.0") != NULL);
  /* the lone rank on another host (same GPU id as the shared one) */
  CHECK_STATUS(check(3, (int[]){0, 0, 0}, (int[]){0, 0, 1}, why, sizeof why), SY_ERR_UNSUPPORTED);
  CHECK(strstr(why, "rank 2 has GPU 0000:18:00.0 on node1 to itself") != NULL);
  /* unevenly spaced ranks on a GPU, every GPU shared */
  CHECK_STATUS(check(6, (int[]){0, 0, 1, 0, 1, 1}, NULL, why, sizeof why), SY_ERR_UNSUPPORTED);
  CHECK(strstr(why, "ranks 0, 1 and 3 share GPU 0000:18:00.0") != NULL);
  CHECK(strstr(why, "evenly spaced") != NULL);
  /* a short buffer: cut, terminated; no buffer: nothing written */
  char tiny[8];
  memset(tiny, 'x', sizeof tiny);
  CHECK_STATUS(check(3, (int[]){0, 1, 0}, NULL, tiny, sizeof tiny), SY_ERR_UNSUPPORTED);
  CHECK(tiny[sizeof tiny - 1] == '\0' && strlen(tiny) == sizeof tiny - 1);
  CHECK_STATUS(check(3, (int[]){0, 1, 0}, NULL, NULL, 0), SY_ERR_UNSUPPORTED);

  /* every placement of 1..6 ranks on up to 3 GPUs of one host */
  int gpus[6], tried = 0, refused = 0;
  for (int world = 1; world <= 6; world++) {
    int total = 1;
    for (int r = 0; r < world; r++) total *= 3;
    for (int code = 0; code < total; code++) {
      for (int r = 0, c = code; r < world; r++, c /= 3) gpus[r] = c % 3;
      const sy_status_t s = check(world, gpus, NULL, why, sizeof why);
      const int want = allowed(world, gpus);
      if ((s == SY_SUCCESS) != want || (s != SY_SUCCESS && (s != SY_ERR_UNSUPPORTED || why[0] == '\0'))) {
        fprintf(stderr, "world %d placement code %d: got %s, want %s\n", world, code, sy_status_name(s),
                want ? "SY_SUCCESS" : "SY_ERR_UNSUPPORTED");
        CHECK(0);
      }
      tried++, refused += !want;
    }
  }
  CHECK(refused > 0 && refused < tried);
  printf("test_placement: %d placements checked, %d refused\n", tried, refused);
  return check_report();
}
