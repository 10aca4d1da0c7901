/*
 * attn_place.c — the placement planner for core attention (sy_attn_place): splits documents into
 * contiguous shards and picks the attention server of every shard so that the servers' causal work is
 * within `tolerance` of the mean, preferring placements that send fewer bytes. Its output is a plan
 * description (shards are the sequences) for sy_attn_plan_create; it runs on the CPU before any data moves.
 *
 * Cost model. A shard holding queries [a, b) of a document computes q*kv - q*(q-1)/2 with q = b - a,
 * kv = b, which is P(b) - P(a) for P(x) = x(x+1)/2: work is additive over shards, so splitting conserves it.
 * Bytes of a document = q_row_bytes * (its rows placed off the owner) + kv_row_bytes * sum over shards of
 * rows * |servers holding that shard or a later one, other than the owner| (a server computing a shard
 * needs the keys of every earlier token).
 *
 * Algorithm (deterministic, no randomness). Every document starts unsplit on its owner. Let M be the mean
 * load, T = (1 + tolerance/2) M the level moves aim at and s = tolerance M / 4 the slack around a target,
 * so that a server landing in [T - s, T + s] is well inside the allowed (1 + tolerance) M. While the most
 * loaded server H exceeds (1 + tolerance) M, or the least loaded L is under (1 - tolerance) M (lowest rank
 * on ties), and iterations remain:
 *   - pair H with L and aim to move delta = min(load(H) - T, T - load(L)), which either finishes H or fills
 *     L, so a run takes about 2 W iterations; once H is within bounds and only L is short, T is
 *     (1 - tolerance/2) M instead (L filled to it, H not drained below it);
 *   - candidate plans, all taking shards of H to L:
 *       single moves of one shard: the whole shard, its head [a, m) (the tail stays), or its tail [m, b)
 *       (the head stays), the cut m chosen so the moved work is closest to delta;
 *       a fill: whole shards in order of bytes per unit of work (cheapest first: a shard going home to its
 *       owner costs negative bytes; long documents move more work per byte), at most one per document,
 *       while the sum stays within delta + s, then one head or tail cut for what is left;
 *   - a plan is valid when it moves work (> 0) and leaves L below H's old load (the pair's maximum falls,
 *     and so does the sum of squared loads: the loop ends). Among valid plans pick the smallest miss
 *     max(0, |moved - delta| - s), then the fewest bytes, then the fewest new shards, then the first found
 *     (documents in rank order, shards in order). No valid plan: stop (the result says unbalanced).
 * A cut never makes a document exceed max_shards_per_doc shards (default 2 W: with only W, one long document
 * cut into W shards cannot shift a cut between two servers that hold no neighbouring shards, and leaves a
 * server well under the mean); neighbouring shards of one document on one server are
 * merged at once (that changes neither work nor bytes). The iteration cap is 16 W + 64.
 * An empty document (0 tokens) has no work: it stays one empty shard on its owner and never moves.
 * Sizes: the result's description counts sequences in int, so the documents in total must fit one (else
 * SY_ERR_INVALID_ARG naming num_docs) and the balancing stops before the shards would pass INT_MAX (an iteration
 * adds at most one); counts from world_size are 64-bit or saturate; allocation products are checked.
 * Cost per iteration: O(shards on H log shards on H + shards); few iterations, so thousands of documents
 * per rank plan in milliseconds.
 */
#include "core/internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FUNC        "sy_attn_place"
#define MAX_DOC_LEN 3037000499ll /* P(L) = L(L+1)/2 stays below INT64_MAX */

typedef struct shard {
  int64_t a, b; /* query rows [a, b) of the document */
  int server;
} shard_t;

typedef struct doc {
  int owner;
  int64_t len;
  int count, cap; /* shards, room in sh */
  shard_t *sh;    /* &one while a single slot suffices */
  shard_t one;
} doc_t;

enum { MOVE_WHOLE, MOVE_HEAD, MOVE_TAIL };

typedef struct move {
  int doc, shard, type;
  int64_t cut;  /* MOVE_HEAD: [a, cut) moves; MOVE_TAIL: [cut, b) moves */
  int64_t work; /* moved */
  double bytes; /* the document's bytes after minus before */
} move_t;

typedef struct fill_cand {
  int doc, shard;
  int64_t work;
  double bytes, ratio;
} fill_cand_t;

typedef struct placer {
  int world, max_shards; /* max_shards <= INT_MAX - 1, so a document's shards plus one cut fit an int */
  double q_bytes, kv_bytes;
  doc_t *docs;
  int num_docs;
  int64_t shards; /* over every document, <= INT_MAX */
  int64_t *load;
  int64_t *stamp, gen; /* distinct-server counting: stamp[server] == gen once seen */
  shard_t *tmp;        /* a document's shards with one move applied */
  int tmp_cap;
  fill_cand_t *cands;
  int64_t *doc_used; /* iteration that used the document in the current fill */
  move_t *fill;
  int cands_cap;
} placer_t;

struct sy_attn_placement {
  int world_size, max_replicas;
  int *num_seqs;
  int64_t *num_tokens;
  const int64_t **seq_lens;
  const int **q_dst, **kv_dst;
  int64_t *len_store;
  int *q_store, *kv_store;
  sy_attn_place_stats_t stats;
};

static int64_t prefix_work(int64_t x) { /* P(x) = x(x+1)/2 without an intermediate overflow */
  return (x % 2 == 0) ? (x / 2) * (x + 1) : x * ((x + 1) / 2);
}

static int64_t shard_work(const shard_t *s) { return prefix_work(s->b) - prefix_work(s->a); }

/* A capacity of at least `need` items (need <= INT_MAX), doubling from `cap` (or `first`), at most INT_MAX. */
static int grown_cap(int cap, int first, int64_t need) {
  int64_t c = cap > 0 ? cap : first;
  while (c < need) c *= 2;
  return c > INT_MAX ? INT_MAX : (int)c;
}

/* a + b for non-negative counts, saturating (the statistics of absurd inputs). */
static int64_t add_sat(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

/* malloc of count (0: 1) x each bytes; NULL when the product exceeds the largest object (PTRDIFF_MAX: gcc 13's
 * -Walloc-size-larger-than proves the bound). */
static void *alloc_array(size_t count, size_t each) {
  count = count ? count : 1;
  return count > (size_t)PTRDIFF_MAX / each ? NULL : malloc(count * each);
}

/* The cut m in [lo, hi] whose P(m) is closest to target (ties: the smaller m); -1 if lo > hi. */
static int64_t closest_cut(double target, int64_t lo, int64_t hi) {
  if (lo > hi) return -1;
  double x = target > 0 ? target : 0;
  int64_t guess = (int64_t)((sqrt(8.0 * x + 1.0) - 1.0) / 2.0), best = -1;
  double best_err = 0;
  for (int64_t m = guess - 2; m <= guess + 2; m++) {
    int64_t c = m < lo ? lo : m > hi ? hi : m;
    double err = fabs((double)prefix_work(c) - target);
    if (best < 0 || err < best_err || (err == best_err && c < best)) best = c, best_err = err;
  }
  return best;
}

/* Bytes one document sends with its shards `sh` (see the header). */
static double doc_bytes(placer_t *pl, const shard_t *sh, int count, int owner, int64_t *q_rows, int64_t *kv_rows) {
  int distinct = 0;
  int64_t q = 0, kv = 0;
  pl->gen++;
  for (int k = count - 1; k >= 0; k--) {
    const int s = sh[k].server;
    const int64_t len = sh[k].b - sh[k].a;
    if (s != owner && pl->stamp[s] != pl->gen) pl->stamp[s] = pl->gen, distinct++;
    kv += len * distinct;
    if (s != owner) q += len;
  }
  if (q_rows) *q_rows = q;
  if (kv_rows) *kv_rows = kv;
  return (double)q * pl->q_bytes + (double)kv * pl->kv_bytes;
}

static int ensure_tmp(placer_t *pl, int need) {
  if (need <= pl->tmp_cap) return 1;
  const int cap = grown_cap(pl->tmp_cap, 8, need);
  shard_t *t = alloc_array((size_t)cap, sizeof *t); /* scratch: nothing to keep */
  if (!t) return 0;
  free(pl->tmp);
  pl->tmp = t, pl->tmp_cap = cap;
  return 1;
}

/* Writes the document's shards with mv applied (shard mv->shard to server `to`) into pl->tmp; returns
 * their count, or -1 if out of memory. */
static int apply_to_tmp(placer_t *pl, const doc_t *d, const move_t *mv, int to) {
  if (!ensure_tmp(pl, d->count + 1)) return -1;
  int n = 0;
  for (int k = 0; k < d->count; k++) {
    shard_t s = d->sh[k];
    if (k != mv->shard) {
      pl->tmp[n++] = s;
      continue;
    }
    if (mv->type == MOVE_WHOLE) {
      pl->tmp[n++] = (shard_t){s.a, s.b, to};
    } else if (mv->type == MOVE_HEAD) {
      pl->tmp[n++] = (shard_t){s.a, mv->cut, to};
      pl->tmp[n++] = (shard_t){mv->cut, s.b, s.server};
    } else {
      pl->tmp[n++] = (shard_t){s.a, mv->cut, s.server};
      pl->tmp[n++] = (shard_t){mv->cut, s.b, to};
    }
  }
  return n;
}

/* Shards after merging neighbours on one server. */
static int merged_count(const shard_t *sh, int n) {
  int c = n > 0;
  for (int k = 1; k < n; k++) c += sh[k].server != sh[k - 1].server;
  return c;
}

/* Fills mv->work and mv->bytes; 0 if the move would exceed max_shards_per_doc, -1 out of memory. */
static int eval_move(placer_t *pl, move_t *mv, int to) {
  const doc_t *d = &pl->docs[mv->doc];
  const shard_t *s = &d->sh[mv->shard];
  int n = apply_to_tmp(pl, d, mv, to);
  if (n < 0) return -1;
  if (mv->type != MOVE_WHOLE && merged_count(pl->tmp, n) > pl->max_shards) return 0;
  mv->work = mv->type == MOVE_WHOLE  ? shard_work(s)
             : mv->type == MOVE_HEAD ? prefix_work(mv->cut) - prefix_work(s->a)
                                     : prefix_work(s->b) - prefix_work(mv->cut);
  mv->bytes = doc_bytes(pl, pl->tmp, n, d->owner, NULL, NULL) - doc_bytes(pl, d->sh, d->count, d->owner, NULL, NULL);
  return 1;
}

/* The head or tail cut of one shard moving work closest to target; 0 if no cut is possible or allowed. */
static int best_cut(placer_t *pl, int doc, int shard, double target, int to, move_t *out) {
  const shard_t *s = &pl->docs[doc].sh[shard];
  if (s->b - s->a < 2) return 0;
  int found = 0;
  for (int type = MOVE_HEAD; type <= MOVE_TAIL; type++) {
    double want = type == MOVE_HEAD ? (double)prefix_work(s->a) + target : (double)prefix_work(s->b) - target;
    move_t mv = {doc, shard, type, closest_cut(want, s->a + 1, s->b - 1), 0, 0};
    int ok = eval_move(pl, &mv, to);
    if (ok < 0) return -1;
    if (!ok || mv.work <= 0) continue;
    double err = fabs((double)mv.work - target), best_err = fabs((double)out->work - target);
    if (!found || err < best_err || (err == best_err && mv.bytes < out->bytes)) *out = mv, found = 1;
  }
  return found;
}

static int cmp_fill(const void *pa, const void *pb) {
  const fill_cand_t *a = pa, *b = pb;
  if (a->ratio != b->ratio) return a->ratio < b->ratio ? -1 : 1;
  if (a->doc != b->doc) return a->doc < b->doc ? -1 : 1;
  return (a->shard > b->shard) - (a->shard < b->shard);
}

/* Applies one move (documents of one plan are distinct, so shard indices are still valid). */
static int apply_move(placer_t *pl, const move_t *mv, int to) {
  doc_t *d = &pl->docs[mv->doc];
  int n = apply_to_tmp(pl, d, mv, to);
  if (n < 0) return 0;
  /* Merge neighbours on one server while copying back. */
  int m = 0;
  for (int k = 0; k < n; k++) {
    if (m > 0 && pl->tmp[m - 1].server == pl->tmp[k].server) pl->tmp[m - 1].b = pl->tmp[k].b;
    else pl->tmp[m++] = pl->tmp[k];
  }
  if (m > d->cap) {
    const int cap = grown_cap(d->cap, 1, m);
    shard_t *sh = alloc_array((size_t)cap, sizeof *sh);
    if (!sh) return 0;
    if (d->sh != &d->one) free(d->sh);
    d->sh = sh, d->cap = cap;
  }
  memcpy(d->sh, pl->tmp, (size_t)m * sizeof *d->sh);
  pl->shards += m - d->count;
  d->count = m;
  return 1;
}

typedef struct plan_score {
  double miss, bytes;
  int new_shards, valid;
} plan_score_t;

static int better(const plan_score_t *a, const plan_score_t *b) {
  if (!b->valid) return a->valid;
  if (!a->valid) return 0;
  if (a->miss != b->miss) return a->miss < b->miss;
  if (a->bytes != b->bytes) return a->bytes < b->bytes;
  return a->new_shards < b->new_shards;
}

static plan_score_t score(const move_t *moves, int n, double delta, double slack, int64_t load_h, int64_t load_l) {
  plan_score_t sc = {0, 0, 0, 0};
  int64_t work = 0;
  for (int k = 0; k < n; k++) {
    work += moves[k].work;
    sc.bytes += moves[k].bytes;
    sc.new_shards += moves[k].type != MOVE_WHOLE;
  }
  double miss = fabs((double)work - delta) - slack;
  sc.miss = miss > 0 ? miss : 0;
  sc.valid = n > 0 && work > 0 && load_l + work < load_h;
  return sc;
}

/* The balancing loop. Returns SY_SUCCESS or SY_ERR_NO_MEMORY. */
static sy_status_t balance(placer_t *pl, double tolerance) {
  const int W = pl->world;
  int64_t total = 0;
  for (int r = 0; r < W; r++) total += pl->load[r];
  const double mean = (double)total / W, limit = (1 + tolerance) * mean, floor_ = (1 - tolerance) * mean;
  const double level = (1 + tolerance / 2) * mean, level_low = (1 - tolerance / 2) * mean;
  const double slack = tolerance * mean / 4;
  const int64_t max_iters = 16 * (int64_t)W + 64;
  for (int64_t iter = 0; iter < max_iters && pl->shards < INT_MAX; iter++) { /* an iteration adds <= 1 shard */
    int h = 0, l = 0;
    for (int r = 1; r < W; r++) {
      if (pl->load[r] > pl->load[h]) h = r;
      if (pl->load[r] < pl->load[l]) l = r;
    }
    const int over = (double)pl->load[h] > limit;
    if ((!over && (double)pl->load[l] >= floor_) || h == l) break;
    const double target = over ? level : level_low;
    double delta = fmin((double)pl->load[h] - target, target - (double)pl->load[l]);

    /* Shards on H (empty ones never move), and what moving each whole costs. */
    int n = 0;
    for (int i = 0; i < pl->num_docs; i++)
      for (int k = 0; k < pl->docs[i].count; k++) {
        if (pl->docs[i].sh[k].server != h || pl->docs[i].len == 0) continue;
        if (n == pl->cands_cap) { /* n < INT_MAX: it counts shards */
          const int cap = grown_cap(pl->cands_cap, 256, (int64_t)n + 1);
          fill_cand_t *c = cap > pl->cands_cap ? alloc_array((size_t)cap, sizeof *c) : NULL;
          move_t *f = cap > pl->cands_cap ? alloc_array((size_t)cap, sizeof *f) : NULL;
          if (!c || !f) return free(c), free(f), SY_ERR_NO_MEMORY;
          if (n) memcpy(c, pl->cands, (size_t)n * sizeof *c);
          free(pl->cands), free(pl->fill); /* the fill is rebuilt every iteration */
          pl->cands = c, pl->fill = f, pl->cands_cap = cap;
        }
        move_t mv = {i, k, MOVE_WHOLE, 0, 0, 0};
        if (eval_move(pl, &mv, l) < 0) return SY_ERR_NO_MEMORY;
        pl->cands[n++] = (fill_cand_t){i, k, mv.work, mv.bytes, mv.bytes / (double)(mv.work > 0 ? mv.work : 1)};
      }
    if (n == 0) break;

    /* The fill. */
    qsort(pl->cands, (size_t)n, sizeof *pl->cands, cmp_fill);
    int nf = 0;
    double moved = 0;
    for (int k = 0; k < n && moved < delta - slack; k++) {
      const fill_cand_t *c = &pl->cands[k];
      if (pl->doc_used[c->doc] == iter + 1 || moved + (double)c->work > delta + slack) continue;
      pl->fill[nf++] = (move_t){c->doc, c->shard, MOVE_WHOLE, 0, c->work, c->bytes};
      pl->doc_used[c->doc] = iter + 1;
      moved += (double)c->work;
    }
    if (moved < delta - slack) { /* one cut for the rest, the cheapest among unused documents */
      move_t cut = {0, 0, 0, 0, 0, 0};
      int have = 0;
      for (int k = 0; k < n; k++) {
        const fill_cand_t *c = &pl->cands[k];
        if (pl->doc_used[c->doc] == iter + 1) continue;
        move_t mv = {0, 0, 0, 0, 0, 0};
        int ok = best_cut(pl, c->doc, c->shard, delta - moved, l, &mv);
        if (ok < 0) return SY_ERR_NO_MEMORY;
        if (!ok) continue;
        double err = fabs((double)mv.work - (delta - moved)), cut_err = fabs((double)cut.work - (delta - moved));
        if (!have || err < cut_err || (err == cut_err && mv.bytes < cut.bytes)) cut = mv, have = 1;
      }
      if (have) pl->fill[nf++] = cut;
    }
    plan_score_t best_sc = score(pl->fill, nf, delta, slack, pl->load[h], pl->load[l]);
    int best_is_fill = best_sc.valid;

    /* Single moves, in document order. */
    move_t single_best = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < pl->num_docs; i++)
      for (int k = 0; k < pl->docs[i].count; k++) {
        if (pl->docs[i].sh[k].server != h || pl->docs[i].len == 0) continue;
        move_t opts[2];
        int no = 0;
        opts[no] = (move_t){i, k, MOVE_WHOLE, 0, 0, 0};
        if (eval_move(pl, &opts[no], l) < 0) return SY_ERR_NO_MEMORY;
        no++;
        int ok = best_cut(pl, i, k, delta, l, &opts[no]);
        if (ok < 0) return SY_ERR_NO_MEMORY;
        no += ok;
        for (int o = 0; o < no; o++) {
          plan_score_t sc = score(&opts[o], 1, delta, slack, pl->load[h], pl->load[l]);
          if (better(&sc, &best_sc)) best_sc = sc, single_best = opts[o], best_is_fill = 0;
        }
      }
    if (!best_sc.valid) break;

    const move_t *plan = best_is_fill ? pl->fill : &single_best;
    const int count = best_is_fill ? nf : 1;
    int64_t work = 0;
    for (int k = 0; k < count; k++) {
      if (!apply_move(pl, &plan[k], l)) return SY_ERR_NO_MEMORY;
      work += plan[k].work;
    }
    pl->load[h] -= work;
    pl->load[l] += work;
  }
  return SY_SUCCESS;
}

/* ---- validation ---------------------------------------------------------------------------------------- */

static sy_status_t validate(const sy_attn_place_desc_t *desc, sy_attn_placement_t *placement) {
  SY_ARG_CHECK(placement, FUNC, "placement is NULL");
  SY_ARG_CHECK(desc, FUNC, "desc is NULL");
  SY_ARG_CHECK(desc->size >= sizeof(sy_attn_place_desc_t), FUNC,
               "desc->size=%zu is smaller than sizeof(sy_attn_place_desc_t)=%zu", desc->size,
               sizeof(sy_attn_place_desc_t));
  const int W = desc->world_size;
  SY_ARG_CHECK(W >= 1, FUNC, "desc->world_size=%d must be >= 1", W);
  SY_ARG_CHECK(desc->tolerance >= 0, FUNC, "desc->tolerance=%g must be >= 0", desc->tolerance);
  SY_ARG_CHECK(desc->max_shards_per_doc >= 0, FUNC, "desc->max_shards_per_doc=%d must be >= 0",
               desc->max_shards_per_doc);
  SY_ARG_CHECK(desc->num_docs, FUNC, "desc->num_docs is NULL");
  /* The counts first (before any length is read): the result numbers its sequences in int. */
  int64_t total_docs = 0;
  for (int r = 0; r < W; r++) {
    const int n = desc->num_docs[r];
    SY_ARG_CHECK(n >= 0, FUNC, "num_docs[%d]=%d must be >= 0", r, n);
    total_docs += n; /* W * INT_MAX at most: no overflow */
  }
  SY_ARG_CHECK(total_docs <= INT_MAX, FUNC, "num_docs: %lld documents in total, more than INT_MAX=%d",
               (long long)total_docs, INT_MAX);
  int64_t total_work = 0;
  for (int r = 0; r < W; r++) {
    const int n = desc->num_docs[r];
    if (n == 0) continue;
    SY_ARG_CHECK(desc->doc_lens, FUNC, "doc_lens is NULL (num_docs[%d]=%d)", r, n);
    SY_ARG_CHECK(desc->doc_lens[r], FUNC, "doc_lens[%d] is NULL (num_docs[%d]=%d)", r, r, n);
    for (int j = 0; j < n; j++) {
      const int64_t len = desc->doc_lens[r][j];
      SY_ARG_CHECK(len >= 0, FUNC, "doc_lens[%d][%d]=%lld must be >= 0", r, j, (long long)len);
      SY_ARG_CHECK(len <= MAX_DOC_LEN, FUNC, "doc_lens[%d][%d]=%lld is too long: its work L(L+1)/2 overflows int64", r,
                   j, (long long)len);
      const int64_t w = prefix_work(len);
      SY_ARG_CHECK(w <= INT64_MAX - total_work, FUNC, "doc_lens: total work overflows int64 at doc_lens[%d][%d]", r, j);
      total_work += w;
    }
  }
  return SY_SUCCESS;
}

/* ---- result -------------------------------------------------------------------------------------------- */

static void placement_free(struct sy_attn_placement *p) {
  if (!p) return;
  free(p->num_seqs);
  free(p->num_tokens);
  free(p->seq_lens);
  free(p->q_dst);
  free(p->kv_dst);
  free(p->len_store);
  free(p->q_store);
  free(p->kv_store);
  free(p);
}

/* Turns the shards into a plan description and the statistics. */
static sy_status_t emit_result(placer_t *pl, const sy_attn_place_desc_t *desc, double tolerance,
                               struct sy_attn_placement **out) {
  const int W = pl->world;
  struct sy_attn_placement *p = calloc(1, sizeof *p);
  if (!p) return SY_ERR_NO_MEMORY;
  p->world_size = W;
  int64_t shards = 0;
  int replicas = 1;
  int *servers = malloc((size_t)W * sizeof *servers); /* a document's distinct servers, ascending */
  p->num_seqs = calloc((size_t)W, sizeof *p->num_seqs);
  p->num_tokens = calloc((size_t)W, sizeof *p->num_tokens);
  p->seq_lens = calloc((size_t)W, sizeof *p->seq_lens);
  p->q_dst = calloc((size_t)W, sizeof *p->q_dst);
  p->kv_dst = calloc((size_t)W, sizeof *p->kv_dst);
  if (!servers || !p->num_seqs || !p->num_tokens || !p->seq_lens || !p->q_dst || !p->kv_dst) goto oom;
  /* Pass 1: counts (shards <= INT_MAX, kept by balance) and the widest KV list. */
  for (int i = 0; i < pl->num_docs; i++) {
    const doc_t *d = &pl->docs[i];
    p->num_seqs[d->owner] += d->count;
    p->num_tokens[d->owner] += d->len;
    shards += d->count;
    pl->gen++;
    int distinct = 0;
    for (int k = d->count - 1; k >= 0; k--)
      if (pl->stamp[d->sh[k].server] != pl->gen) pl->stamp[d->sh[k].server] = pl->gen, distinct++;
    if (distinct > replicas) replicas = distinct;
  }
  p->max_replicas = replicas;
  p->len_store = alloc_array((size_t)shards, sizeof *p->len_store);
  p->q_store = alloc_array((size_t)shards, sizeof *p->q_store);
  p->kv_store = alloc_array((size_t)shards * (size_t)replicas, sizeof *p->kv_store); /* both < 2^31 */
  if (!p->len_store || !p->q_store || !p->kv_store) goto oom;
  int64_t at = 0;
  for (int r = 0; r < W; r++) {
    p->seq_lens[r] = p->len_store + at;
    p->q_dst[r] = p->q_store + at;
    p->kv_dst[r] = p->kv_store + at * replicas;
    at += p->num_seqs[r];
  }
  /* Pass 2: documents are grouped by owner in order (pl->docs is rank-major). */
  int64_t q_moved = 0, kv_moved = 0;
  at = 0;
  for (int i = 0; i < pl->num_docs; i++) {
    const doc_t *d = &pl->docs[i];
    int64_t q_rows, kv_rows;
    doc_bytes(pl, d->sh, d->count, d->owner, &q_rows, &kv_rows);
    q_moved = add_sat(q_moved, q_rows);
    kv_moved = add_sat(kv_moved, kv_rows);
    int distinct = 0;
    for (int k = d->count - 1; k >= 0; k--) {
      const int s = d->sh[k].server;
      int pos = 0;
      while (pos < distinct && servers[pos] < s) pos++;
      if (pos == distinct || servers[pos] != s) {
        memmove(servers + pos + 1, servers + pos, (size_t)(distinct - pos) * sizeof *servers);
        servers[pos] = s;
        distinct++;
      }
      const int64_t seq = at + k;
      p->len_store[seq] = d->sh[k].b - d->sh[k].a;
      p->q_store[seq] = s;
      int *kv = p->kv_store + seq * replicas;
      for (int c = 0; c < replicas; c++) kv[c] = c < distinct ? servers[c] : -1;
    }
    at += d->count;
  }
  free(servers);
  servers = NULL;

  int64_t total = 0, max = 0, min = pl->load[0];
  for (int r = 0; r < W; r++) {
    total += pl->load[r];
    if (pl->load[r] > max) max = pl->load[r];
    if (pl->load[r] < min) min = pl->load[r];
  }
  sy_attn_place_stats_t *st = &p->stats;
  st->work_max = (double)max;
  st->work_min = (double)min;
  st->work_mean = (double)total / W;
  st->max_over_mean = total > 0 ? st->work_max / st->work_mean : 1.0;
  st->min_over_mean = total > 0 ? st->work_min / st->work_mean : 1.0;
  st->q_rows_moved = q_moved;
  st->kv_rows_moved = kv_moved;
  st->shards = (int)shards;
  st->balanced = total == 0 || (st->work_max <= (1 + tolerance) * st->work_mean * (1 + 1e-12) &&
                                st->work_min >= (1 - tolerance) * st->work_mean * (1 - 1e-12));
  (void)desc;
  *out = p;
  return SY_SUCCESS;
oom:
  SY_WARN("%s: out of memory for the result (%lld shards, KV lists of %d)", FUNC, (long long)shards, replicas);
  free(servers);
  placement_free(p);
  return SY_ERR_NO_MEMORY;
}

/* ---- public ---------------------------------------------------------------------------------------------- */

SY_API sy_status_t sy_attn_place(const sy_attn_place_desc_t *desc, sy_attn_placement_t *placement) {
  sy__last_error_clear();
  sy_status_t status = validate(desc, placement);
  if (status != SY_SUCCESS) return status;
  *placement = NULL;
  const int W = desc->world_size;
  const double tolerance = desc->tolerance > 0 ? desc->tolerance : 0.10;
  placer_t pl;
  memset(&pl, 0, sizeof pl);
  pl.world = W;
  const int64_t max_shards = desc->max_shards_per_doc > 0 ? desc->max_shards_per_doc : 2 * (int64_t)W;
  pl.max_shards = max_shards < INT_MAX - 1 ? (int)max_shards : INT_MAX - 1;
  pl.q_bytes = desc->q_row_bytes ? (double)desc->q_row_bytes : 1.0;
  pl.kv_bytes = desc->kv_row_bytes ? (double)desc->kv_row_bytes : 1.0;
  for (int r = 0; r < W; r++) pl.num_docs += desc->num_docs[r]; /* <= INT_MAX by validate() */
  pl.shards = pl.num_docs;
  pl.docs = calloc((size_t)(pl.num_docs ? pl.num_docs : 1), sizeof *pl.docs);
  pl.doc_used = calloc((size_t)(pl.num_docs ? pl.num_docs : 1), sizeof *pl.doc_used);
  pl.load = calloc((size_t)W, sizeof *pl.load);
  pl.stamp = calloc((size_t)W, sizeof *pl.stamp);
  if (!pl.docs || !pl.doc_used || !pl.load || !pl.stamp) {
    status = SY_ERR_NO_MEMORY;
    goto done;
  }
  int i = 0;
  for (int r = 0; r < W; r++)
    for (int j = 0; j < desc->num_docs[r]; j++, i++) {
      doc_t *d = &pl.docs[i];
      d->owner = r;
      d->len = desc->doc_lens[r][j];
      d->one = (shard_t){0, d->len, r};
      d->sh = &d->one;
      d->count = d->cap = 1;
      pl.load[r] += prefix_work(d->len);
    }
  SY_CHECK_GOTO(balance(&pl, tolerance), status, done);
  SY_CHECK_GOTO(emit_result(&pl, desc, tolerance, placement), status, done);
done:
  if (pl.docs)
    for (int k = 0; k < pl.num_docs; k++)
      if (pl.docs[k].sh != &pl.docs[k].one) free(pl.docs[k].sh);
  free(pl.docs);
  free(pl.doc_used);
  free(pl.load);
  free(pl.stamp);
  free(pl.tmp);
  free(pl.cands);
  free(pl.fill);
  return status;
}

SY_API sy_status_t sy_attn_placement_desc(sy_attn_placement_t placement, sy_attn_plan_desc_t *desc) {
  SY_ARG_CHECK(placement, "sy_attn_placement_desc", "placement is NULL");
  SY_ARG_CHECK(desc, "sy_attn_placement_desc", "desc is NULL");
  sy_attn_plan_desc_t d = SY_ATTN_PLAN_DESC_INIT;
  d.world_size = placement->world_size;
  d.max_replicas = placement->max_replicas;
  d.num_seqs = placement->num_seqs;
  d.num_tokens = placement->num_tokens;
  d.seq_lens = placement->seq_lens;
  d.q_dst = placement->q_dst;
  d.kv_dst = placement->kv_dst;
  *desc = d;
  return SY_SUCCESS;
}

SY_API sy_status_t sy_attn_placement_stats(sy_attn_placement_t placement, sy_attn_place_stats_t *stats) {
  SY_ARG_CHECK(placement, "sy_attn_placement_stats", "placement is NULL");
  SY_ARG_CHECK(stats, "sy_attn_placement_stats", "stats is NULL");
  *stats = placement->stats;
  return SY_SUCCESS;
}

SY_API sy_status_t sy_attn_placement_destroy(sy_attn_placement_t placement) {
  placement_free(placement);
  return SY_SUCCESS;
}
