/*
 * launch.c — who this process is: reads the launcher's environment (syrun, torchrun, srun, mpirun, PMI)
 * into a sy_launch_info_t before anything else of the library runs. The first launcher whose rank or world
 * variable is set wins, and its values are checked (numbers, rank < world, local rank < local size) so a
 * misconfigured job fails here with the variable named, instead of hanging later in the rendezvous.
 */
#include "boot/boot.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct launcher {
  const char *source;
  const char *rank, *world, *local_rank, *local_size; /* local_size NULL: computed (slurm) */
} launcher_t;

/* In precedence order: syrun's own variables first, so a syrun started inside torchrun/srun still wins. */
static const launcher_t launchers[] = {
    {"syrun", "SY_RANK", "SY_WORLD_SIZE", "SY_LOCAL_RANK", "SY_LOCAL_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
};

/* An empty value counts as unset, as in the env registry (sy__env_raw). */
static const char *env_value(const char *name) {
  const char *value = getenv(name);
  return (value && *value) ? value : NULL;
}

/* Reads an integer variable >= min. Returns 0 when unset, 1 when read, -1 (logged) when malformed. */
static int read_int(const char *name, int min, int *out) {
  const char *text = env_value(name);
  if (!text) return 0;
  long long value;
  if (sy__parse_int(text, &value) != SY_SUCCESS || value < INT_MIN || value > INT_MAX) {
    SY_WARN("launcher environment: %s=%s is not an integer", name, text);
    return -1;
  }
  if (value < min) {
    SY_WARN("launcher environment: %s=%s must be >= %d", name, text, min);
    return -1;
  }
  *out = (int)value;
  return 1;
}

/* Tasks on node `node` from SLURM_TASKS_PER_NODE, whose form is "4(x2),3": counts, each optionally repeated.
 * Returns 1 when found, 0 when the list is shorter than node + 1 entries, -1 (logged) when malformed. */
static int slurm_tasks_on_node(const char *list, int node, int *out) {
  const char *p = list;
  long long index = 0;
  while (*p) {
    char *end;
    long count = strtol(p, &end, 10);
    if (end == p || count < 1 || count > INT_MAX) goto malformed;
    long repeat = 1;
    p = end;
    if (*p == '(') {
      if (p[1] != 'x') goto malformed;
      repeat = strtol(p + 2, &end, 10);
      if (end == p + 2 || repeat < 1 || *end != ')') goto malformed;
      p = end + 1;
    }
    if (node < index + repeat) {
      *out = (int)count;
      return 1;
    }
    index += repeat;
    if (*p == ',') p++;
    else if (*p) goto malformed;
  }
  return 0;
malformed:
  SY_WARN("launcher environment: SLURM_TASKS_PER_NODE=%s is not a list like 4(x2),3", list);
  return -1;
}

/* Slurm's per-node task count: SLURM_NTASKS_PER_NODE when given, else this node's entry of
 * SLURM_TASKS_PER_NODE (SLURM_NODEID picks it; the first when unset). 0: neither says. */
static int slurm_local_size(int *out) {
  int got = read_int("SLURM_NTASKS_PER_NODE", 1, out);
  if (got) return got;
  const char *list = env_value("SLURM_TASKS_PER_NODE");
  if (!list) return 0;
  int node = 0;
  if (read_int("SLURM_NODEID", 0, &node) < 0) return -1;
  got = slurm_tasks_on_node(list, node, out);
  if (got == 0) {
    SY_WARN("launcher environment: SLURM_TASKS_PER_NODE=%s has no entry for SLURM_NODEID=%d", list, node);
    return -1;
  }
  return got;
}

static sy_status_t read_launcher(const launcher_t *l, sy_launch_info_t *info) {
  int rank = -1, world = -1;
  int got_rank = read_int(l->rank, 0, &rank);
  int got_world = read_int(l->world, 1, &world);
  if (got_rank < 0 || got_world < 0) return SY_ERR_INVALID_ARG;
  if (!got_rank || !got_world) {
    SY_WARN("launcher environment (%s): %s is set but %s is not", l->source, got_rank ? l->rank : l->world,
            got_rank ? l->world : l->rank);
    return SY_ERR_INVALID_ARG;
  }
  if (world > SY_MAX_WORLD_SIZE) {
    SY_WARN("launcher environment (%s): %s=%d exceeds SY_MAX_WORLD_SIZE=%d", l->source, l->world, world,
            SY_MAX_WORLD_SIZE);
    return SY_ERR_INVALID_ARG;
  }
  if (rank >= world) {
    SY_WARN("launcher environment (%s): %s=%d must be < %s=%d", l->source, l->rank, rank, l->world, world);
    return SY_ERR_INVALID_ARG;
  }
  int local_rank = -1, local_size = -1;
  int got_local_rank = read_int(l->local_rank, 0, &local_rank);
  int got_local_size = l->local_size ? read_int(l->local_size, 1, &local_size) : slurm_local_size(&local_size);
  if (got_local_rank < 0 || got_local_size < 0) return SY_ERR_INVALID_ARG;
  const char *local_size_name = l->local_size ? l->local_size : "SLURM_NTASKS_PER_NODE/SLURM_TASKS_PER_NODE";
  if (!got_local_rank) { /* nothing says where we sit on the node: one node */
    local_rank = rank;
    local_size = world;
  } else {
    if (!got_local_size) local_size = world;
    if (local_size > world) {
      SY_WARN("launcher environment (%s): %s=%d exceeds %s=%d", l->source, local_size_name, local_size, l->world,
              world);
      return SY_ERR_INVALID_ARG;
    }
    if (local_rank >= local_size) {
      SY_WARN("launcher environment (%s): %s=%d must be < local size %d", l->source, l->local_rank, local_rank,
              local_size);
      return SY_ERR_INVALID_ARG;
    }
  }
  info->rank = rank;
  info->world_size = world;
  info->local_rank = local_rank;
  info->local_size = local_size;
  info->source = l->source;
  return SY_SUCCESS;
}

sy_status_t sy__launch_info_from_env(sy_launch_info_t *info) {
  SY_ARG_CHECK(info != NULL, "sy__launch_info_from_env", "info=NULL");
  sy_launch_info_t found = {0, 1, 0, 1, -1, "none"};
  for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
    const launcher_t *l = &launchers[i];
    if (!env_value(l->rank) && !env_value(l->world)) continue;
    sy_status_t st = read_launcher(l, &found);
    if (st != SY_SUCCESS) return st;
    break;
  }
  int device = -1;
  if (read_int("SY_DEVICE", -1, &device) < 0) return SY_ERR_INVALID_ARG;
  found.device = device;
  SY_INFO("launcher: %s, rank %d of %d (local %d of %d), device %d", found.source, found.rank, found.world_size,
          found.local_rank, found.local_size, found.device);
  *info = found;
  return SY_SUCCESS;
}
