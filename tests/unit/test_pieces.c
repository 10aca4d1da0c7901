/*
 * test_pieces.c — the piece count of the alltoall and attention kernels (src/core/pieces.h), which sender and
 * receiver each compute for a pair and must agree on, against its rules recomputed here:
 *  - an empty pair is one piece (it still signals); a count never exceeds max_count;
 *  - pieces are at most max_piece bytes (unless max_count caps the count) and, where the pair is larger than
 *    SY_PIECE_MIN and max_piece allows, at least SY_PIECE_MIN;
 *  - with every pair the same size and the piece between its bounds, a rank's pieces total about
 *    SY_PIECE_TARGET (64) whatever the world size and channel count;
 *  - the cases measured in bench/NOTES.md at world 1: 64 KiB in 8 pieces, 1 MiB in 64, 16 MiB in 256 of 64 KiB;
 *    and a tiny max_piece (SY_A2A_CHUNK=16) still governs.
 */
#include "check.h"
#include "core/pieces.h"

#include <stdint.h>
#include <stdio.h>

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

int main(void) {
  const uint64_t KiB = 1024, MiB = 1024 * KiB, max_pieces[] = {16, 4 * KiB, 64 * KiB, 1 * MiB};
  const uint32_t pair_counts[] = {1, 2, 4, 8, 16, 64, 512};
  CHECK_EQ_INT(sy__piece_count(0, 4, 64 * KiB, 1024), 1);
  CHECK_EQ_INT(sy__piece_count(0, 1, 16, 1), 1);

  long long checked = 0;
  for (size_t mi = 0; mi < sizeof max_pieces / sizeof max_pieces[0]; mi++) {
    const uint64_t max_piece = max_pieces[mi];
    for (size_t pi = 0; pi < sizeof pair_counts / sizeof pair_counts[0]; pi++) {
      const uint32_t pairs = pair_counts[pi];
      for (uint64_t bytes = 1; bytes <= 256 * MiB; bytes = bytes * 5 / 4 + 1) {
        const uint32_t c = sy__piece_count(bytes, pairs, max_piece, 1024);
        const uint32_t uncapped = sy__piece_count(bytes, pairs, max_piece, UINT32_MAX);
        const uint64_t piece = ceil_div(bytes, uncapped); /* the largest piece */
        checked++;
        CHECK(c >= 1 && c <= 1024);
        CHECK(c == (uncapped < 1024 ? uncapped : 1024));
        CHECK(piece <= max_piece);
        if (bytes >= SY_PIECE_MIN && max_piece >= SY_PIECE_MIN && uncapped > 1)
          CHECK(bytes / uncapped >= SY_PIECE_MIN / 2); /* pieces of about SY_PIECE_MIN or more */
        /* Equal pairs, piece between its bounds: the rank's pieces total about SY_PIECE_TARGET. */
        const uint64_t ideal = bytes * pairs / SY_PIECE_TARGET;
        if (ideal >= SY_PIECE_MIN && ideal <= max_piece && bytes >= 4 * ideal) {
          const uint64_t total = (uint64_t)uncapped * pairs;
          if (total < SY_PIECE_TARGET || total > 2 * SY_PIECE_TARGET) {
            fprintf(stderr, "bytes %llu pairs %u max_piece %llu: %llu pieces in all\n", (unsigned long long)bytes,
                    pairs, (unsigned long long)max_piece, (unsigned long long)total);
            CHECK(0);
          }
        }
      }
    }
  }

  /* The world-1 cases measured (alltoall, SY_A2A_CHUNK = 64 KiB). */
  CHECK_EQ_INT(sy__piece_count(64 * KiB, 1, 64 * KiB, 1024), 8);
  CHECK_EQ_INT(sy__piece_count(1 * MiB, 1, 64 * KiB, 1024), 64);
  CHECK_EQ_INT(sy__piece_count(16 * MiB, 1, 64 * KiB, 1024), 256);
  CHECK_EQ_INT(sy__piece_count(4 * KiB, 1, 64 * KiB, 1024), 1);
  /* Attention Q+KV at 128 tokens (Q 512 KiB, KV 128 KiB; two channels): 32 + 16 pieces. */
  CHECK_EQ_INT(sy__piece_count(512 * KiB, 2, 64 * KiB, 1024), 32);
  CHECK_EQ_INT(sy__piece_count(128 * KiB, 2, 64 * KiB, 1024), 16);
  /* 4 ranks, 1 MiB to each peer: pieces of 1 MiB x 4 / 64 = 64 KiB, 16 per pair, 64 in all. */
  CHECK_EQ_INT(sy__piece_count(1 * MiB, 4, 64 * KiB, 1024), 16);
  /* SY_A2A_CHUNK below SY_PIECE_MIN still governs; the cap holds. */
  CHECK_EQ_INT(sy__piece_count(4 * KiB, 1, 16, 1024), 256);
  CHECK_EQ_INT(sy__piece_count(64 * KiB, 1, 16, 1024), 1024);
  printf("test_pieces: %lld sizes checked\n", checked);
  return check_report();
}
