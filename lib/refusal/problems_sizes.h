/* A refusal's unknown sizes as one cause: however many rules need sizes nobody gave (each a
 * TPS_PROBLEM_SIZES group of problems.h), the user has one thing to do, so they are named
 * once each, in the order first needed. */
#ifndef TPS_PROBLEMS_SIZES_H
#define TPS_PROBLEMS_SIZES_H

#include <stddef.h>
#include <stdint.h>

#include "../base/buf.h"
#include "problems.h"

/* The names of the unknown sizes of every TPS_PROBLEM_SIZES group of ps, each once, joined
 * by ", " into names; *groups: how many such groups.  Returns how many tensors need them. */
uint64_t tps_problems_missing_sizes(const tps_problems *ps, tps_buf *names, size_t *groups);

#endif
