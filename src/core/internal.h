/*
 * internal.h — what every layer of the library shares, in one include: the log and error trail (log.h), the
 * environment-variable registry (env.h), and the communicator with its backend table (comm.h). Not installed;
 * users see switchyard.h only.
 *
 * Names: internal non-static functions are sy__name (hidden from the shared library's exports); static
 * functions plain names; device helpers say their scope (_warp, _block, _grid).
 */
#ifndef SY_INTERNAL_H
#define SY_INTERNAL_H

#include "core/comm.h"
#include "core/env.h"
#include "core/log.h"
#include "switchyard.h"

#endif /* SY_INTERNAL_H */
