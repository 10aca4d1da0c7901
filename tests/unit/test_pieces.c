/*
 * test_pieces.c — the piece count of the alltoall and attention kernels (src/ref/pieces.h), which sender and
 * receiver each compute for a pair and must agree on, against its rules recomputed here:
 *  - an empty pair is one piece (it still signals); a count never exceeds max_count;
 *  - pieces are at most max_piece bytes (unless max_count caps the count) and, where the pair is larger than
 *    SY_PIECE_MIN and max_piece allows, at least SY_PIECE_MIN;
 *  - with every pair the same size and the piece between its bounds, a rank's pieces total about
 *    SY_PIECE_TARGET (64) whatever the world size and channel count;
 *  - the cases measured in bench/NOTES.md at world 1: 64 KiB in 8 pieces, 1 MiB in 64, 16 MiB in 256 of 64 KiB;
 *    and a tiny max_piece (SY_A2A_CHUNK=16) still governs;
 *  - the ticket order's stride (sy__piece_stride): coprime to the count, so the tickets visit every piece once
 *    (checked piece by piece up to 3,000), the one a double-precision 0.618 x count search finds (what was
 *    measured), and interleaving: any 3 tickets in a row touch both halves of the pieces, any 11 both the first
 *    quarter and the rest (the self copy's pair and the link's).
 */
#include "check.h"
#include "ref/pieces.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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
  /* The ticket order's stride. */
  CHECK_EQ_INT(sy__piece_stride(0), 1);
  CHECK_EQ_INT(sy__piece_stride(1), 1);
  CHECK_EQ_INT(sy__piece_stride(1000), 617); /* 618 = 2 x 309 shares a factor with 1000; 617 is prime */
  unsigned char *seen = calloc(3000, 1);
  CHECK(seen != NULL);
  long long strides = 0;
  for (uint32_t n = 2; seen && n <= 200000; n++) {
    const uint32_t st = sy__piece_stride(n);
    strides++;
    CHECK(st >= 1 && st < n);
    CHECK_EQ_INT(sy__piece_gcd(st, n), 1);
    uint32_t want = (uint32_t)((double)n * 0.6180339887 + 0.5);
    for (uint32_t d = 0;; d++) {
      if (want > d && sy__piece_gcd(want - d, n) == 1) {
        want -= d;
        break;
      }
      if (want + d < n && sy__piece_gcd(want + d, n) == 1) {
        want += d;
        break;
      }
    }
    if (st != want) {
      fprintf(stderr, "count %u: stride %u, the double-precision search gives %u\n", n, st, want);
      CHECK(0);
    }
    if (n > 3000) continue;
    for (uint32_t i = 0; i < n; i++) seen[i] = 0;
    uint32_t run_half[2] = {0, 0}, run_quarter[2] = {0, 0}, worst_half = 0, worst_quarter = 0;
    for (uint64_t k = 0; k < n; k++) {
      const uint32_t piece = (uint32_t)(k * st % n);
      CHECK(!seen[piece]);
      seen[piece] = 1;
      const int low_half = piece < n / 2, low_quarter = piece < n / 4;
      run_half[low_half] = 0; /* tickets since each side was last touched */
      run_half[!low_half]++;
      run_quarter[low_quarter] = 0;
      run_quarter[!low_quarter]++;
      if (k >= 8) { /* past the start, where neither side was touched yet */
        worst_half = run_half[0] > worst_half ? run_half[0] : worst_half;
        worst_half = run_half[1] > worst_half ? run_half[1] : worst_half;
        if (n >= 8) {
          worst_quarter = run_quarter[0] > worst_quarter ? run_quarter[0] : worst_quarter;
          worst_quarter = run_quarter[1] > worst_quarter ? run_quarter[1] : worst_quarter;
        }
      }
    }
    if (n >= 8 && (worst_half > 2 || worst_quarter > 10)) {
      fprintf(stderr, "count %u stride %u: %u tickets in a row miss a half, %u a quarter\n", n, st, worst_half,
              worst_quarter);
      CHECK(0);
    }
  }
  free(seen);
  printf("test_pieces: %lld sizes and %lld strides checked\n", checked, strides);
  return check_report();
}
