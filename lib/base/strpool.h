/* Strings that live exactly as long as their owner, packed into a few large blocks: the
 * tensor names and layout rules of a loaded manifest (issue 27: tens of thousands of short
 * strings, where a malloc each costs its header and rounding), with repeated strings (one
 * layout rule names thousands of tensors) stored once when interned.  Not thread-safe; the
 * strings are freed all together with the pool, never one by one.  The pool is
 * reference-counted, so that a manifest copied at a new tp (lib/set/retarget.h) shares its
 * source's names instead of copying them. */
#ifndef TPS_STRPOOL_H
#define TPS_STRPOOL_H

#include <stddef.h>

typedef struct tps_strpool tps_strpool;

tps_strpool *tps_strpool_new(void); /* one reference; NULL when out of memory */
tps_strpool *tps_strpool_ref(tps_strpool *p); /* another reference; returns p */
/* A NUL-terminated copy of s[0, n) in the pool; NULL when out of memory. */
char *tps_strpool_add(tps_strpool *p, const char *s, size_t n);
/* The same, except that equal strings get the same copy; s has no NUL in its n bytes. */
char *tps_strpool_intern(tps_strpool *p, const char *s, size_t n);
void tps_strpool_unref(tps_strpool *p); /* frees it with the last reference; accepts NULL */

#endif
