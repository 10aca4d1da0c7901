/*
 * placement.h — which placements of ranks on GPUs the cuda backend can start with, checked before NVSHMEM starts
 * (implemented in placement.c; unit-tested in tests/unit/test_placement.c).
 *
 * NVSHMEM (3.4) finds the ranks that share a GPU by host and PCI bus id and, on those ranks only, runs extra
 * bootstrap collectives during its start; a rank alone on its GPU never joins them, so a job where some ranks share a
 * GPU and others do not hangs in nvshmem's init without an error (run 35, bench/NOTES.md "ranks sharing one GPU").
 * It also exits the process where the ranks of one GPU are not evenly spaced (its same-GPU team). So the start
 * allgathers every rank's place and refuses both, on every rank alike, before calling NVSHMEM.
 */
#ifndef SY_CORE_PLACEMENT_H
#define SY_CORE_PLACEMENT_H

#include "switchyard.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One rank's place: its host's name and its GPU's PCI bus id ("0000:19:00.0"), what NVSHMEM compares (host name,
 * PCI domain, bus and device) to find ranks sharing a GPU; each NUL-terminated within its array. */
typedef struct sy_place {
  char host[256];
  char gpu[32];
} sy_place_t;

/* SY_SUCCESS where every rank has a GPU of its own, or every GPU in use is shared by ranks whose numbers are evenly
 * spaced (0,0,0; 0,1,0,1; 0,0,1,1); otherwise SY_ERR_UNSUPPORTED with the reason, naming ranks and GPUs, in
 * why[why_len] (always NUL-terminated when why_len > 0). world >= 1; places[world], in rank order. */
sy_status_t sy__placement_check(const sy_place_t *places, int world, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif /* SY_CORE_PLACEMENT_H */
