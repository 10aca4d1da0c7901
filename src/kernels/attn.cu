/* placeholder: the attention-dispatch kernels are being written */
#include "kernels/cuda_backend.h"
extern "C" sy_status_t sy__cuda_attn_create(sy_comm_t comm, struct sy_attn *attn) { return SY_ERR_UNSUPPORTED; }
extern "C" void sy__cuda_attn_destroy(sy_comm_t comm, struct sy_attn *attn) {}
extern "C" sy_status_t sy__cuda_attn_plan_upload(sy_comm_t comm, struct sy_attn_plan *plan) { return SY_ERR_UNSUPPORTED; }
extern "C" sy_status_t sy__cuda_attn_run(sy_comm_t comm, struct sy_attn *attn, const struct sy_attn_plan *plan,
                                         const sy_attn_call_t *call, cudaStream_t stream) { return SY_ERR_UNSUPPORTED; }
