/* placeholder: launcher environment and rendezvous are being written */
#include "boot/boot.h"
sy_status_t sy__launch_info_from_env(sy_launch_info_t *info) { info->rank = 0; info->world_size = 1; info->local_rank = 0; info->local_size = 1; info->device = -1; info->source = "none"; return SY_SUCCESS; }
sy_status_t sy__boot_open(int rank, int world_size, uint64_t timeout_ms, sy_boot_t **boot) { return SY_ERR_UNSUPPORTED; }
sy_status_t sy__boot_allgather(sy_boot_t *boot, const void *send, void *recv, size_t bytes) { return SY_ERR_UNSUPPORTED; }
sy_status_t sy__boot_barrier(sy_boot_t *boot) { return SY_ERR_UNSUPPORTED; }
sy_status_t sy__boot_open_trivial(sy_boot_t **boot) { return SY_ERR_UNSUPPORTED; }
void sy__boot_close(sy_boot_t *boot) {}
