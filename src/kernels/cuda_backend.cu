/* placeholder: the cuda backend is being written */
#include "core/internal.h"
extern "C" int sy__cuda_available(char *reason, size_t n) { return 0; }
extern "C" sy_status_t sy__cuda_comm_init(sy_comm_t comm, const sy_resolved_config_t *config) { return SY_ERR_UNSUPPORTED; }
