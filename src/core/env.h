/*
 * env.h — the environment-variable registry: env_list.h holds the one list (name, type, default, doc), from
 * which the ids below and sy-info -e's table are generated. Implemented in env.c.
 */
#ifndef SY_CORE_ENV_H
#define SY_CORE_ENV_H

#include "switchyard.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------ */
/* Environment-variable registry (src/core/env_list.h holds the list; sy-info -e prints it).          */
/* ------------------------------------------------------------------------------------------------ */
typedef enum sy_env_type { SY_ENV_STRING, SY_ENV_INT, SY_ENV_SIZE, SY_ENV_BOOL } sy_env_type_t;

typedef struct sy_env_def {
  const char *name;
  sy_env_type_t type;
  const char *default_value;
  const char *doc;
} sy_env_def_t;

typedef enum sy_env_id {
#define SY_ENV_ID_(name, type, def, doc) SY_ENVID_##name,
#include "env_list.h"
#undef SY_ENV_ID_
  SY_ENVID_COUNT_
} sy_env_id_t;

const sy_env_def_t *sy__env_def(sy_env_id_t id);
int sy__env_count(void);
/* The value set in the environment, or NULL. */
const char *sy__env_raw(sy_env_id_t id);
/* Typed values: the environment's when set and valid, the default otherwise. A set but malformed value is
 * SY_ERR_INVALID_ARG with a log line naming the variable (the default is not silently used). */
sy_status_t sy__env_int(sy_env_id_t id, long long *value);
sy_status_t sy__env_size(sy_env_id_t id, size_t *value);
sy_status_t sy__env_bool(sy_env_id_t id, int *value);
const char *sy__env_str(sy_env_id_t id);

/* Parsers (tested on their own). int: decimal, optional sign. size: a count with an optional K/M/G/T
 * suffix (powers of 1024; "KiB"/"KB"/"k" accepted). bool: 1/0, true/false, yes/no, on/off. */
sy_status_t sy__parse_int(const char *text, long long *value);
sy_status_t sy__parse_size(const char *text, size_t *value);
sy_status_t sy__parse_bool(const char *text, int *value);

#ifdef __cplusplus
}
#endif
#endif
