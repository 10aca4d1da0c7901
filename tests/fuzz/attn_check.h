/*
 * attn_check.h — the invariants the attention planners' fuzz target (fuzz_attn.c) checks on every result,
 * written from the header's promises and independently of the unit tests' code: a plan set (every rank's
 * plan of one description) and a placement. A broken invariant prints what and where, then aborts, so
 * libFuzzer keeps the input that broke it.
 */
#ifndef SY_FUZZ_ATTN_CHECK_H
#define SY_FUZZ_ATTN_CHECK_H

#include "plan/attn_plan.h"
#include "switchyard.h"

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_MAX_WORLD 8

#define FUZZ_CHECK(cond)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                     \
    }                                                                              \
  } while (0)

/* Every rank's plan of desc (plans[r] from sy_attn_plan_create on rank r): the per-sequence metadata
 * (sy_attn_plan_seqs, sy_attn_plan_info) against the description and the arrival order (source, sequence,
 * replica), and the row segments of all four directions row by row: what a sender sends a peer is exactly
 * what the peer expects from it, every destination row written once from the right source row, nothing
 * outside either buffer, segments ascending and merged, the W x W counts the same on every rank. */
void fuzz_check_plans(const sy_attn_plan_desc_t *desc, sy_attn_plan_t const *plans);

/* A placement of in: its description tiles every document with shards in order, the KV rule (the distinct
 * servers of the shard and every later shard of its document, ascending, -1 padded), neighbouring shards
 * on different servers, work conserved, and the statistics equal a recount. */
void fuzz_check_placement(const sy_attn_place_desc_t *in, sy_attn_placement_t placement);

#endif
