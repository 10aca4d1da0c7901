/*
 * pieces.h — how many pieces one (sender, receiver) pair's bytes travel in, each with its own signal, in the
 * alltoall and attention kernels: pieces of at most `max_piece` bytes (SY_A2A_CHUNK), cut finer for small
 * pairs — down to SY_PIECE_MIN — so that a rank's `pairs` pairs (world size x channels) make about
 * SY_PIECE_TARGET pieces, and that many blocks copy at once instead of a few copying several rounds each
 * (bench/NOTES.md, "pieces for alltoall and attention, sized by the pair"). A function of the pair's bytes, `pairs` and
 * `max_piece` only, which sender and receiver both know, so they agree on the count without talking. An empty
 * pair still signals once; at most `max_count`. Plain C for the CPU test (tests/unit/test_pieces.c), inline
 * host and device code for the kernels.
 */
#ifndef SY_REF_PIECES_H
#define SY_REF_PIECES_H

#include <stdint.h>

#include "ref/hd.h"

#define SY_PIECE_MIN    8192u
#define SY_PIECE_TARGET 64u

SY_HD uint32_t sy__piece_count(uint64_t bytes, uint32_t pairs, uint64_t max_piece, uint32_t max_count) {
  if (bytes == 0) return 1;
  uint64_t piece = bytes * pairs / SY_PIECE_TARGET;
  if (piece < SY_PIECE_MIN) piece = SY_PIECE_MIN;
  if (piece > max_piece) piece = max_piece;
  const uint64_t c = (bytes + piece - 1) / piece;
  return c > max_count ? max_count : (uint32_t)c;
}

/* Piece j of `count` of a pair's `bytes`: [*lo, *hi), pieces of equal 16-aligned length but the last (empty
 * where the pair is). */
SY_HD void sy__piece_range(uint64_t bytes, uint32_t count, uint32_t j, uint64_t *lo, uint64_t *hi) {
  const uint64_t len = ((bytes + count - 1) / count + 15) & ~(uint64_t)15;
  const uint64_t a = (uint64_t)j * len, b = a + len;
  *lo = a < bytes ? a : bytes;
  *hi = b < bytes ? b : bytes;
}

/* The stride of the ticket order (more pieces than blocks: ticket k takes piece k x stride mod count):
 * coprime to `count`, so the tickets visit every piece once, and the nearest such to 0.618 x count, a
 * golden-ratio sequence, so that any stretch of tickets touches every contiguous range of pieces (a pair's)
 * in proportion to its length. 1 for a count below 2. */
SY_HD uint32_t sy__piece_gcd(uint32_t a, uint32_t b) {
  while (b) {
    const uint32_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

SY_HD uint32_t sy__piece_stride(uint32_t count) {
  if (count < 2) return 1;
  const uint32_t s = (uint32_t)(((uint64_t)count * 2654435769u + (1u << 31)) >> 32); /* round(count x 0.618...) */
  for (uint32_t d = 0;; d++) { /* ends by d = s - 1 at the latest: 1 is coprime to everything */
    if (s > d && sy__piece_gcd(s - d, count) == 1) return s - d;
    if (s + d < count && sy__piece_gcd(s + d, count) == 1) return s + d;
  }
}

#endif
