/*
 * moe_ht.h — what the host backend's high-throughput MoE files share: the object's scratch, the offer every
 * rank publishes in a call's exchange, and the checks every call makes. moe_ht.c holds the object, the layout
 * and these checks; moe_ht_rows.c the calls that move rows (dispatch, combine, the combine's backward).
 */
#ifndef SY_HOST_MOE_HT_H
#define SY_HOST_MOE_HT_H

#include "host/host.h"
#include "ref/moe_ht_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct host_moe_ht {
  sy_moe_ht_handle_layout_t hl;
  int32_t *ids, *pos;    /* [max_tokens][top_k]: this rank's layout before it goes into the handle */
  int32_t *named;        /* [num_experts]: this rank's tokens naming each expert */
  int32_t *send;         /* [W]: this rank's tokens naming one of each rank's experts */
  int32_t *recv_counts;  /* [W][L] */
  int32_t *recv_tokens;  /* [W] */
  int32_t *offsets;      /* [L + 1] */
  int32_t *fill, *first; /* [L], [L + 1]: the dispatch's next row of each local expert, the source's first */
  int32_t *next;         /* [W]: the combine's next token to each rank */
  unsigned char *wire;   /* one token as the wire carries it */
  float *scales;         /* its scales */
  float *acc, *partial;  /* [hidden] */
  uint16_t *rounded;     /* [hidden] */
} host_moe_ht_t;

/* What a rank publishes in a call's exchange. */
typedef struct ht_offer {
  sy_status_t status;        /* this rank's own checks (it logged the argument) */
  sy_moe_ht_config_t config; /* the object's: ranks inside different objects' calls are told apart */
  uint64_t serial;           /* the object's creation number on the communicator: the same, for objects alike */
  uint64_t layout;           /* calls with a handle: the layout call that wrote it */
  int num_tokens;
  const unsigned char *handle;  /* read by the peers: ids, pos, recv_rows (sections no call of theirs writes) */
  const int32_t *named, *send;  /* layout: this rank's counts (host_moe_ht_t's) */
  const sy_moe_ht_call_t *call; /* the caller's buffers */
} ht_offer_t;

/* The verdict every rank reaches from every offer: SY_ERR_MISMATCH (sticky) for ranks in calls of objects
 * configured differently; SY_ERR_INVALID_ARG for ranks in calls of different objects configured alike (nothing
 * written); the first rank's failed status (logged by that rank, named by the others); with a handle,
 * SY_ERR_INVALID_ARG where the ranks' handles are of different layout calls. */
sy_status_t sy__host_moe_ht_verdict(sy_comm_t comm, const ht_offer_t *mine, int with_handle, const char *fn);

/* This rank's handle: this object's (magic, object) and of num_tokens tokens; its header into *header. */
sy_status_t sy__host_moe_ht_check_handle(const struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                         sy_moe_ht_handle_header_t *header, const char *fn);

#ifdef __cplusplus
}
#endif
#endif
