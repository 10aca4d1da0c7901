/* placeholder: the host backend is being written */
#include "core/internal.h"
sy_status_t sy__host_comm_init(sy_comm_t comm, const sy_resolved_config_t *config) { return SY_ERR_UNSUPPORTED; }
