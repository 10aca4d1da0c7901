/*
 * env.c — the environment-variable registry (env_list.h) and its parsers. A variable that is set but
 * malformed is an error naming it: a typo must not silently become the default.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const sy_env_def_t env_defs[] = {
#define SY_ENV_ID_(name, type, def, doc) {#name, type, def, doc},
#include "env_list.h"
#undef SY_ENV_ID_
};

int sy__env_count(void) { return (int)(sizeof env_defs / sizeof env_defs[0]); }

const sy_env_def_t *sy__env_def(sy_env_id_t id) {
  if ((int)id < 0 || (int)id >= sy__env_count()) return NULL;
  return &env_defs[id];
}

const char *sy__env_raw(sy_env_id_t id) {
  const sy_env_def_t *def = sy__env_def(id);
  if (!def) return NULL;
  const char *value = getenv(def->name);
  return (value && *value) ? value : NULL;
}

const char *sy__env_str(sy_env_id_t id) {
  const char *value = sy__env_raw(id);
  const sy_env_def_t *def = sy__env_def(id);
  return value ? value : (def ? def->default_value : "");
}

static const char *skip_space(const char *s) {
  while (isspace((unsigned char)*s)) s++;
  return s;
}

sy_status_t sy__parse_int(const char *text, long long *value) {
  if (!text || !value) return SY_ERR_INVALID_ARG;
  const char *s = skip_space(text);
  if (!*s) return SY_ERR_INVALID_ARG;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *skip_space(end)) return SY_ERR_INVALID_ARG;
  *value = v;
  return SY_SUCCESS;
}

sy_status_t sy__parse_size(const char *text, size_t *value) {
  if (!text || !value) return SY_ERR_INVALID_ARG;
  const char *s = skip_space(text);
  if (!isdigit((unsigned char)*s)) return SY_ERR_INVALID_ARG; /* no sign, no empty */
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return SY_ERR_INVALID_ARG;
  unsigned shift = 0;
  const char *suffix = end;
  if (*suffix) {
    switch (toupper((unsigned char)*suffix)) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      case 'B': shift = 0; break;
      default: return SY_ERR_INVALID_ARG;
    }
    suffix++;
    if (shift) { /* accept K, KB, KiB */
      if (*suffix == 'i' || *suffix == 'I') suffix++;
      if (*suffix == 'b' || *suffix == 'B') suffix++;
    }
  }
  if (*skip_space(suffix)) return SY_ERR_INVALID_ARG;
  if (shift && v > (ULLONG_MAX >> shift)) return SY_ERR_INVALID_ARG;
  v <<= shift;
  if (v > (unsigned long long)SIZE_MAX) return SY_ERR_INVALID_ARG;
  *value = (size_t)v;
  return SY_SUCCESS;
}

sy_status_t sy__parse_bool(const char *text, int *value) {
  if (!text || !value) return SY_ERR_INVALID_ARG;
  static const char *yes[] = {"1", "true", "yes", "on"};
  static const char *no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(text, yes[i])) {
      *value = 1;
      return SY_SUCCESS;
    }
    if (!strcasecmp(text, no[i])) {
      *value = 0;
      return SY_SUCCESS;
    }
  }
  return SY_ERR_INVALID_ARG;
}

/* Parses the set value (or the default) with the given parser; a malformed set value is an error. */
static sy_status_t env_typed(sy_env_id_t id, sy_env_type_t want, void *out) {
  const sy_env_def_t *def = sy__env_def(id);
  if (!def || def->type != want) {
    SY_WARN("env registry: %s read as the wrong type", def ? def->name : "?");
    return SY_ERR_INTERNAL;
  }
  const char *raw = sy__env_raw(id);
  const char *text = raw ? raw : def->default_value;
  sy_status_t st = SY_ERR_INTERNAL;
  if (want == SY_ENV_INT) st = sy__parse_int(text, (long long *)out);
  else if (want == SY_ENV_SIZE) st = sy__parse_size(text, (size_t *)out);
  else if (want == SY_ENV_BOOL) st = sy__parse_bool(text, (int *)out);
  if (st != SY_SUCCESS) {
    SY_WARN("environment variable %s=%s is malformed (%s)", def->name, text,
            want == SY_ENV_INT    ? "want an integer"
            : want == SY_ENV_SIZE ? "want a size such as 512M"
                                  : "want 0 or 1");
    return SY_ERR_INVALID_ARG;
  }
  return SY_SUCCESS;
}

sy_status_t sy__env_int(sy_env_id_t id, long long *value) { return env_typed(id, SY_ENV_INT, value); }
sy_status_t sy__env_size(sy_env_id_t id, size_t *value) { return env_typed(id, SY_ENV_SIZE, value); }
sy_status_t sy__env_bool(sy_env_id_t id, int *value) { return env_typed(id, SY_ENV_BOOL, value); }
