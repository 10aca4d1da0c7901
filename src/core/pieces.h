/*
 * pieces.h — how many pieces one (sender, receiver) pair's bytes travel in, each with its own signal, in the
 * alltoall and attention kernels: pieces of at most `max_piece` bytes (SY_A2A_CHUNK), cut finer for small
 * pairs — down to SY_PIECE_MIN — so that a rank's `pairs` pairs (world size x channels) make about
 * SY_PIECE_TARGET pieces, and that many blocks copy at once instead of a few copying several rounds each
 * (bench/NOTES.md, "Pieces for alltoall and attention"). A function of the pair's bytes, `pairs` and
 * `max_piece` only, which sender and receiver both know, so they agree on the count without talking. An empty
 * pair still signals once; at most `max_count`. Plain C for the CPU test (tests/unit/test_pieces.c), inline
 * host and device code for the kernels.
 */
#ifndef SY_CORE_PIECES_H
#define SY_CORE_PIECES_H

#include <stdint.h>

#ifdef __CUDACC__
#define SY_PIECES_HD __host__ __device__ __forceinline__
#else
#define SY_PIECES_HD static inline
#endif

#define SY_PIECE_MIN 8192u
#define SY_PIECE_TARGET 64u

SY_PIECES_HD uint32_t sy__piece_count(uint64_t bytes, uint32_t pairs, uint64_t max_piece, uint32_t max_count) {
  if (bytes == 0) return 1;
  uint64_t piece = bytes * pairs / SY_PIECE_TARGET;
  if (piece < SY_PIECE_MIN) piece = SY_PIECE_MIN;
  if (piece > max_piece) piece = max_piece;
  const uint64_t c = (bytes + piece - 1) / piece;
  return c > max_count ? max_count : (uint32_t)c;
}

#endif
