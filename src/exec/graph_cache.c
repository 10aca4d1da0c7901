/*
 * graph_cache.c — sy_graph_cache_*: a CUDA graph per shape bucket (switchyard.h, "Orchestration"). The buckets are
 * the caller's (or vLLM's: 1, 2, 4, steps of 8 to 256, steps of 16 beyond); a bucket's first run warms the step
 * up, captures it and instantiates it, later runs launch the graph, and a refreshed bucket captures again and
 * updates its instantiated graph in place, instantiating anew only where CUDA refuses the update. The CUDA calls
 * are src/cuda/graph.cu's; the host backend runs the step every time.
 */
#include "exec/graph.h"

#include <stdlib.h>
#include <string.h>

#define MAX_BUCKETS 4096

typedef struct bucket_graph {
  void *graph, *exec; /* the last capture and its instantiation; NULL until the first run */
  int stale;          /* refreshed: capture again at the next run */
} bucket_graph_t;

struct sy_graph_cache {
  sy_comm_t comm;
  sy_graph_step_fn step;
  void *user;
  int warmup, num_buckets;
  int *buckets;
  bucket_graph_t *graphs;
  sy_graph_cache_stats_t stats;
};

/* vLLM's capture sizes: 1, 2, 4, then 8 .. 256 by 8, then by 16 up to max_bucket, and max_bucket itself where the
 * steps miss it. Returns the count (out may be NULL). */
static int default_buckets(int max_bucket, int *out) {
  int n = 0, last = 0;
  for (int b = 1; b <= 4; b *= 2) n += out ? (out[n] = b, 1) : 1;
  for (int b = 8; b <= 256; b += 8) n += out ? (out[n] = b, 1) : 1;
  for (int b = 272; b <= max_bucket; b += 16) n += out ? (out[n] = b, 1) : 1, last = b;
  if (max_bucket > 256 && last != max_bucket) n += out ? (out[n] = max_bucket, 1) : 1;
  return n;
}

sy_status_t sy_graph_cache_create(sy_comm_t comm, const sy_graph_cache_config_t *config, sy_graph_step_fn step,
                                  void *user, sy_graph_cache_t *cache) {
  static const char *fn = "sy_graph_cache_create";
  SY_ARG_CHECK(cache != NULL, fn, "cache is NULL");
  *cache = NULL;
  SY_COMM_GUARD(comm, fn);
  SY_ARG_CHECK(step != NULL, fn, "step is NULL");
  sy_graph_cache_config_t c = SY_GRAPH_CACHE_CONFIG_INIT;
  if (config) {
    SY_ARG_CHECK(config->size >= sizeof(size_t) && config->size <= sizeof c, fn,
                 "config->size=%zu: set it with SY_GRAPH_CACHE_CONFIG_INIT (sizeof is %zu)", config->size, sizeof c);
    memcpy(&c, config, config->size);
  }
  SY_ARG_CHECK(c.warmup >= 0 && c.warmup <= 100, fn, "config->warmup=%d outside [0, 100]", c.warmup);
  if (c.buckets) {
    SY_ARG_CHECK(c.num_buckets >= 1 && c.num_buckets <= MAX_BUCKETS, fn, "config->num_buckets=%d outside [1, %d]",
                 c.num_buckets, MAX_BUCKETS);
    for (int i = 0; i < c.num_buckets; i++)
      SY_ARG_CHECK(c.buckets[i] > 0 && (i == 0 || c.buckets[i] > c.buckets[i - 1]), fn,
                   "config->buckets[%d]=%d: the buckets must be positive and ascending", i, c.buckets[i]);
  } else {
    SY_ARG_CHECK(c.max_bucket >= 256 && c.max_bucket <= 65536, fn,
                 "config->max_bucket=%d outside [256, 65536] (the default buckets reach 256 first)", c.max_bucket);
  }
  struct sy_graph_cache *g = calloc(1, sizeof *g);
  const int n = c.buckets ? c.num_buckets : default_buckets(c.max_bucket, NULL);
  if (g) g->buckets = malloc(sizeof(int) * (size_t)n);
  if (g && g->buckets) g->graphs = calloc((size_t)n, sizeof *g->graphs);
  if (!g || !g->buckets || !g->graphs) {
    if (g) free(g->buckets);
    free(g);
    return SY_ERR_NO_MEMORY;
  }
  if (c.buckets) memcpy(g->buckets, c.buckets, sizeof(int) * (size_t)n);
  else default_buckets(c.max_bucket, g->buckets);
  g->comm = comm;
  g->step = step;
  g->user = user;
  g->warmup = c.warmup;
  g->num_buckets = n;
  *cache = g;
  return SY_SUCCESS;
}

sy_status_t sy_graph_cache_destroy(sy_graph_cache_t cache) {
  if (!cache) return SY_SUCCESS;
  for (int i = 0; i < cache->num_buckets; i++) sy__cuda_graph_destroy(cache->graphs[i].graph, cache->graphs[i].exec);
  free(cache->graphs);
  free(cache->buckets);
  free(cache);
  return SY_SUCCESS;
}

/* The index of the smallest bucket >= n, or -1. */
static int bucket_index(const struct sy_graph_cache *g, int n) {
  int lo = 0, hi = g->num_buckets;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (g->buckets[mid] < n) lo = mid + 1;
    else hi = mid;
  }
  return lo < g->num_buckets ? lo : -1;
}

sy_status_t sy_graph_cache_bucket(sy_graph_cache_t cache, int n, int *bucket) {
  static const char *fn = "sy_graph_cache_bucket";
  SY_ARG_CHECK(cache != NULL, fn, "cache is NULL");
  SY_ARG_CHECK(bucket != NULL, fn, "bucket is NULL");
  const int i = n >= 1 ? bucket_index(cache, n) : -1;
  SY_ARG_CHECK(i >= 0, fn, "n=%d outside [1, %d] (the largest bucket)", n, cache->buckets[cache->num_buckets - 1]);
  *bucket = cache->buckets[i];
  return SY_SUCCESS;
}

/* Captures bucket i's step and makes its graph current: updated in place where it has one, else instantiated. */
static sy_status_t capture(struct sy_graph_cache *g, int i, cudaStream_t stream) {
  bucket_graph_t *b = &g->graphs[i];
  void *graph = NULL;
  SY_CHECK(sy__cuda_graph_capture(stream, g->step, g->user, g->buckets[i], &graph));
  g->stats.captures++;
  int updated = 0;
  if (b->exec) {
    const sy_status_t st = sy__cuda_graph_update(b->exec, graph, &updated);
    if (st != SY_SUCCESS) { /* the new graph is nobody's: give it back (the old one stays current) */
      sy__cuda_graph_destroy(graph, NULL);
      return st;
    }
  }
  if (updated) {
    g->stats.updates++;
    sy__cuda_graph_destroy(b->graph, NULL);
    b->graph = graph;
    return SY_SUCCESS;
  }
  void *exec = NULL;
  const sy_status_t st = sy__cuda_graph_instantiate(graph, &exec);
  if (st != SY_SUCCESS) {
    sy__cuda_graph_destroy(graph, NULL);
    return st;
  }
  g->stats.instantiations++;
  sy__cuda_graph_destroy(b->graph, b->exec);
  if (!b->exec) g->stats.graphs++;
  b->graph = graph;
  b->exec = exec;
  return SY_SUCCESS;
}

sy_status_t sy_graph_cache_run(sy_graph_cache_t cache, int n, cudaStream_t stream) {
  static const char *fn = "sy_graph_cache_run";
  SY_ARG_CHECK(cache != NULL, fn, "cache is NULL");
  SY_COMM_GUARD(cache->comm, fn);
  const int i = n >= 1 ? bucket_index(cache, n) : -1;
  SY_ARG_CHECK(i >= 0, fn, "n=%d outside [1, %d] (the largest bucket)", n, cache->buckets[cache->num_buckets - 1]);
  if (cache->comm->backend != SY_BACKEND_CUDA) {
    SY_CHECK(cache->step(cache->user, cache->buckets[i], stream));
    cache->stats.eager_runs++; /* counted when it ran, as the warm-ups are */
    return SY_SUCCESS;
  }
  SY_CHECK(sy__check_stream(cache->comm, stream, fn));
  int capturing = 0;
  SY_CHECK(sy__cuda_stream_capturing(stream, &capturing));
  SY_ARG_CHECK(!capturing, fn, "stream is capturing a graph: run the cache outside captures");
  bucket_graph_t *b = &cache->graphs[i];
  if (!b->exec) {
    for (int w = 0; w < cache->warmup; w++) {
      SY_CHECK(cache->step(cache->user, cache->buckets[i], stream));
      cache->stats.eager_runs++;
    }
  }
  if (!b->exec || b->stale) {
    SY_CHECK(capture(cache, i, stream));
    b->stale = 0;
  }
  SY_CHECK(sy__cuda_graph_launch(b->exec, stream));
  cache->stats.replays++;
  return SY_SUCCESS;
}

sy_status_t sy_graph_cache_refresh(sy_graph_cache_t cache, int n) {
  static const char *fn = "sy_graph_cache_refresh";
  SY_ARG_CHECK(cache != NULL, fn, "cache is NULL");
  if (n == 0) {
    for (int i = 0; i < cache->num_buckets; i++) cache->graphs[i].stale = 1;
    return SY_SUCCESS;
  }
  const int i = n >= 1 ? bucket_index(cache, n) : -1;
  SY_ARG_CHECK(i >= 0, fn, "n=%d outside [0, %d] (0: every bucket)", n, cache->buckets[cache->num_buckets - 1]);
  cache->graphs[i].stale = 1;
  return SY_SUCCESS;
}

sy_status_t sy_graph_cache_stats(sy_graph_cache_t cache, sy_graph_cache_stats_t *stats) {
  static const char *fn = "sy_graph_cache_stats";
  SY_ARG_CHECK(cache != NULL, fn, "cache is NULL");
  SY_ARG_CHECK(stats != NULL, fn, "stats is NULL");
  SY_ARG_CHECK(stats->size >= sizeof(size_t) && stats->size <= sizeof *stats, fn,
               "stats->size=%zu: set it with SY_GRAPH_CACHE_STATS_INIT (sizeof is %zu)", stats->size, sizeof *stats);
  const size_t size = stats->size;
  memcpy(stats, &cache->stats, size);
  stats->size = size;
  return SY_SUCCESS;
}
