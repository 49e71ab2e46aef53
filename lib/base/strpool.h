/* Strings that live exactly as long as their owner: the tensor names and layout rules of a
 * loaded manifest, repeated strings (one layout rule names thousands of tensors) stored once
 * when interned.  A string pool is a pool (lib/base/pool.h says the rest: blocks,
 * reference counts, threads) whose items are NUL-terminated strings. */
#ifndef TPS_STRPOOL_H
#define TPS_STRPOOL_H

#include <stddef.h>

#include "pool.h"

typedef tps_pool tps_strpool;

tps_strpool *tps_strpool_new(void); /* one reference; NULL when out of memory */
static inline tps_strpool *tps_strpool_ref(tps_strpool *p) { return tps_pool_ref(p); }
/* A NUL-terminated copy of s[0, n) in the pool; NULL when out of memory. */
char *tps_strpool_add(tps_strpool *p, const char *s, size_t n);
/* The same, except that equal strings get the same copy; s has no NUL in its n bytes. */
char *tps_strpool_intern(tps_strpool *p, const char *s, size_t n);
static inline void tps_strpool_unref(tps_strpool *p) { tps_pool_unref(p); } /* accepts NULL */

#endif
