/*
 * test_launch_env.c — sy__launch_info_from_env: each launcher's variables (syrun, torchrun, slurm, openmpi,
 * pmi), their precedence, the local-rank fallbacks, and the rejection (SY_ERR_INVALID_ARG, a log line naming
 * the variable, *info untouched) of malformed or inconsistent values and of world sizes above SY_MAX_WORLD_SIZE.
 */
#include "boot/boot.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* clang-format off */
static const char *const all_vars[] = {
    "SY_RANK", "SY_WORLD_SIZE", "SY_LOCAL_RANK", "SY_LOCAL_SIZE", "SY_DEVICE",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
};
/* clang-format on */

static void clear_env(void) {
  for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
}

/* Sets "NAME=VALUE" pairs, after clearing every launcher variable. */
static void set_env(const char *const *pairs) {
  clear_env();
  for (; *pairs; pairs++) {
    char name[64];
    const char *eq = strchr(*pairs, '=');
    size_t len = (size_t)(eq - *pairs);
    memcpy(name, *pairs, len);
    name[len] = '\0';
    setenv(name, eq + 1, 1);
  }
}

static void expect_info(const char *const *pairs, int rank, int world, int local_rank, int local_size, int device,
                        const char *source, int line) {
  set_env(pairs);
  sy_launch_info_t info;
  memset(&info, 0x5a, sizeof info);
  sy_status_t st = sy__launch_info_from_env(&info);
  if (st != SY_SUCCESS) fprintf(stderr, "  (case at line %d)\n", line);
  CHECK_OK(st);
  if (st != SY_SUCCESS) return;
  int ok = info.rank == rank && info.world_size == world && info.local_rank == local_rank &&
           info.local_size == local_size && info.device == device && !strcmp(info.source, source);
  if (!ok)
    fprintf(stderr, "  line %d: got %d/%d local %d/%d device %d source %s\n", line, info.rank, info.world_size,
            info.local_rank, info.local_size, info.device, info.source);
  CHECK_EQ_INT(info.rank, rank);
  CHECK_EQ_INT(info.world_size, world);
  CHECK_EQ_INT(info.local_rank, local_rank);
  CHECK_EQ_INT(info.local_size, local_size);
  CHECK_EQ_INT(info.device, device);
  CHECK_EQ_STR(info.source, source);
}
#define EXPECT(pairs, rank, world, lrank, lsize, device, source) \
  expect_info(pairs, rank, world, lrank, lsize, device, source, __LINE__)

static char log_dir[256];

/* The call must fail with SY_ERR_INVALID_ARG, leave info alone and log a line containing `needle`. */
static void expect_reject(const char *const *pairs, const char *needle, int line) {
  set_env(pairs);
  char log_path[300];
  snprintf(log_path, sizeof log_path, "%s/log.%d", log_dir, line);
  setenv("SY_DEBUG", "WARN", 1);
  setenv("SY_DEBUG_FILE", log_path, 1);
  sy__log_reset();
  sy_launch_info_t info;
  memset(&info, 0x5a, sizeof info);
  sy_launch_info_t before = info;
  sy_status_t st = sy__launch_info_from_env(&info);
  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  if (st != SY_ERR_INVALID_ARG) fprintf(stderr, "  (case at line %d)\n", line);
  CHECK_STATUS(st, SY_ERR_INVALID_ARG);
  CHECK(memcmp(&info, &before, sizeof info) == 0);
  char text[2048] = "";
  FILE *f = fopen(log_path, "r");
  if (f) {
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
  }
  unlink(log_path);
  if (!strstr(text, needle)) fprintf(stderr, "  line %d: log \"%s\" lacks \"%s\"\n", line, text, needle);
  CHECK(strstr(text, needle) != NULL);
}
#define REJECT(pairs, needle) expect_reject(pairs, needle, __LINE__)

#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_ENV   ((const char *const[]){NULL})

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(log_dir, sizeof log_dir, "%s/sy-launch-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(log_dir)) {
    perror("mkdtemp");
    return 1;
  }

  /* No launcher: a singleton. */
  EXPECT(NO_ENV, 0, 1, 0, 1, -1, "none");

  /* Each launcher on its own. */
  EXPECT(ENV("SY_RANK=2", "SY_WORLD_SIZE=4", "SY_LOCAL_RANK=2", "SY_LOCAL_SIZE=4", "SY_DEVICE=6"), 2, 4, 2, 4, 6,
         "syrun");
  EXPECT(ENV("RANK=5", "WORLD_SIZE=16", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=8"), 5, 16, 1, 8, -1, "torchrun");
  EXPECT(ENV("SLURM_PROCID=9", "SLURM_NTASKS=12", "SLURM_LOCALID=3", "SLURM_NTASKS_PER_NODE=4"), 9, 12, 3, 4, -1,
         "slurm");
  EXPECT(ENV("SLURM_PROCID=9", "SLURM_NTASKS=12", "SLURM_LOCALID=1", "SLURM_TASKS_PER_NODE=4(x3)"), 9, 12, 1, 4, -1,
         "slurm");
  /* SLURM_TASKS_PER_NODE's entry for this node (SLURM_NODEID), not just the first. */
  EXPECT(ENV("SLURM_PROCID=5", "SLURM_NTASKS=7", "SLURM_LOCALID=3", "SLURM_NODEID=1", "SLURM_TASKS_PER_NODE=2,4,1"), 5,
         7, 3, 4, -1, "slurm");
  EXPECT(ENV("SLURM_PROCID=6", "SLURM_NTASKS=7", "SLURM_LOCALID=0", "SLURM_NODEID=3", "SLURM_TASKS_PER_NODE=2(x3),1"),
         6, 7, 0, 1, -1, "slurm");
  EXPECT(ENV("OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1",
             "OMPI_COMM_WORLD_LOCAL_SIZE=2"),
         3, 4, 1, 2, -1, "openmpi");
  EXPECT(ENV("PMI_RANK=1", "PMI_SIZE=2", "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=2"), 1, 2, 1, 2, -1, "pmi");

  /* Missing local rank: one node assumed (local = global). Local rank without local size: size = world. */
  EXPECT(ENV("RANK=3", "WORLD_SIZE=4"), 3, 4, 3, 4, -1, "torchrun");
  EXPECT(ENV("PMI_RANK=2", "PMI_SIZE=3"), 2, 3, 2, 3, -1, "pmi");
  EXPECT(ENV("SLURM_PROCID=1", "SLURM_NTASKS=2"), 1, 2, 1, 2, -1, "slurm");
  EXPECT(ENV("RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1"), 3, 4, 1, 4, -1, "torchrun");
  /* An empty value counts as unset. */
  EXPECT(ENV("RANK=3", "WORLD_SIZE=4", "LOCAL_RANK="), 3, 4, 3, 4, -1, "torchrun");
  EXPECT(ENV("RANK=", "WORLD_SIZE="), 0, 1, 0, 1, -1, "none");

  /* SY_DEVICE is read whatever the launcher; -1 means "not chosen". */
  EXPECT(ENV("RANK=0", "WORLD_SIZE=2", "SY_DEVICE=3"), 0, 2, 0, 2, 3, "torchrun");
  EXPECT(ENV("SY_DEVICE=-1"), 0, 1, 0, 1, -1, "none");
  EXPECT(ENV("SY_RANK=0", "SY_WORLD_SIZE=1", "SY_DEVICE= 7 "), 0, 1, 0, 1, 7, "syrun");

  /* Precedence: syrun > torchrun > slurm > openmpi > pmi; no mixing of one launcher's values with another's. */
  const char *const everything[] = {"SY_RANK=1",
                                    "SY_WORLD_SIZE=2",
                                    "RANK=2",
                                    "WORLD_SIZE=3",
                                    "LOCAL_RANK=0",
                                    "SLURM_PROCID=3",
                                    "SLURM_NTASKS=4",
                                    "OMPI_COMM_WORLD_RANK=4",
                                    "OMPI_COMM_WORLD_SIZE=5",
                                    "PMI_RANK=5",
                                    "PMI_SIZE=6",
                                    NULL};
  EXPECT(everything, 1, 2, 1, 2, -1, "syrun");
  EXPECT(everything + 2, 2, 3, 0, 3, -1, "torchrun");
  EXPECT(everything + 5, 3, 4, 3, 4, -1, "slurm");
  EXPECT(everything + 7, 4, 5, 4, 5, -1, "openmpi");
  EXPECT(everything + 9, 5, 6, 5, 6, -1, "pmi");

  /* Malformed numbers, each naming the variable and value. */
  REJECT(ENV("SY_RANK=abc", "SY_WORLD_SIZE=4"), "SY_RANK=abc");
  REJECT(ENV("RANK=1", "WORLD_SIZE=4x"), "WORLD_SIZE=4x");
  REJECT(ENV("RANK=1.5", "WORLD_SIZE=4"), "RANK=1.5");
  REJECT(ENV("RANK=1", "WORLD_SIZE=99999999999"), "WORLD_SIZE=99999999999");
  REJECT(ENV("SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=z"), "SLURM_LOCALID=z");
  REJECT(ENV("SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_TASKS_PER_NODE=2(3)"),
         "SLURM_TASKS_PER_NODE=2(3)");
  REJECT(ENV("SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0", "SLURM_NODEID=2", "SLURM_TASKS_PER_NODE=1,1"),
         "SLURM_NODEID=2");
  REJECT(ENV("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0",
             "OMPI_COMM_WORLD_LOCAL_SIZE=two"),
         "OMPI_COMM_WORLD_LOCAL_SIZE=two");
  REJECT(ENV("SY_DEVICE=gpu0"), "SY_DEVICE=gpu0");
  /* Negative values, world < 1, rank >= world, local rank >= local size, local size > world. */
  REJECT(ENV("SY_RANK=-1", "SY_WORLD_SIZE=4"), "SY_RANK=-1");
  REJECT(ENV("RANK=0", "WORLD_SIZE=0"), "WORLD_SIZE=0");
  REJECT(ENV("PMI_RANK=0", "PMI_SIZE=-2"), "PMI_SIZE=-2");
  REJECT(ENV("SY_DEVICE=-2"), "SY_DEVICE=-2");
  REJECT(ENV("RANK=4", "WORLD_SIZE=4"), "RANK=4 must be < WORLD_SIZE=4");
  REJECT(ENV("SY_RANK=7", "SY_WORLD_SIZE=2"), "SY_RANK=7 must be < SY_WORLD_SIZE=2");
  REJECT(ENV("OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=3"), "OMPI_COMM_WORLD_RANK=3");
  REJECT(ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2"), "LOCAL_RANK=2");
  REJECT(ENV("RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=8"), "LOCAL_WORLD_SIZE=8");
  REJECT(ENV("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=3", "SLURM_NTASKS_PER_NODE=2"), "SLURM_LOCALID=3");
  /* An absurd world size is named, not left to fail as an allocation of world-sized tables. */
  REJECT(ENV("RANK=0", "WORLD_SIZE=2147483647"), "WORLD_SIZE=2147483647 exceeds SY_MAX_WORLD_SIZE=65536");
  REJECT(ENV("SY_RANK=0", "SY_WORLD_SIZE=65537"), "SY_WORLD_SIZE=65537 exceeds SY_MAX_WORLD_SIZE");
  EXPECT(ENV("SY_RANK=65535", "SY_WORLD_SIZE=65536", "SY_LOCAL_RANK=7", "SY_LOCAL_SIZE=8"), 65535, 65536, 7, 8, -1,
         "syrun");
  /* Half a launcher: its rank without its world (or the reverse) is an error, not a silent singleton. */
  REJECT(ENV("RANK=1"), "RANK is set but WORLD_SIZE is not");
  REJECT(ENV("SY_WORLD_SIZE=4"), "SY_WORLD_SIZE is set but SY_RANK is not");
  /* A broken higher-precedence launcher is not papered over by a lower one. */
  REJECT(ENV("SY_RANK=x", "SY_WORLD_SIZE=2", "RANK=0", "WORLD_SIZE=2"), "SY_RANK=x");

  CHECK_STATUS(sy__launch_info_from_env(NULL), SY_ERR_INVALID_ARG);

  clear_env();
  rmdir(log_dir);
  return check_report();
}
