/* Items that live exactly as long as their owner, packed into a few large blocks that never
 * move, with equal items stored once when interned: the one design behind the string pool
 * (lib/base/strpool.h: a manifest's tensor names and layout rules) and the partition pool
 * (lib/partition/partpool.h: a manifest's cuts), issue 27's remedy for tens of thousands of
 * small records where a malloc each costs its header and rounding.  An interned item is
 * found again by an open-addressing table of pointers whose load stays under one half, so a
 * look-up is a few probes, and a hostile input with every item distinct costs a table as
 * large as its count, never a quadratic search.  The pool is reference-counted, so that a
 * manifest copied at a new tp (lib/set/retarget.h) shares its source's items.  Not
 * thread-safe: add and intern from one thread while no other does; items may be read from
 * any thread.  They are freed all together with the pool, never one by one. */
#ifndef TPS_POOL_H
#define TPS_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the pool's items are: how a key hashes and when a stored item equals it.  key and n
 * are what tps_pool_intern was given. */
typedef struct tps_pool_kind {
    uint64_t (*hash)(const void *key, size_t n);
    bool (*same)(const void *item, const void *key, size_t n);
} tps_pool_kind;

typedef struct tps_pool tps_pool;

tps_pool *tps_pool_new(const tps_pool_kind *kind); /* one reference; NULL when out of memory */
tps_pool *tps_pool_ref(tps_pool *p);               /* another reference; returns p */
void tps_pool_unref(tps_pool *p);                  /* frees it with the last one; accepts NULL */

/* size bytes aligned to align (a power of two, at most alignof(max_align_t)), not interned;
 * NULL when out of memory. */
void *tps_pool_alloc(tps_pool *p, size_t size, size_t align);

/* The pooled item equal to key (n bytes), or a new one: size bytes (size >= n), aligned to
 * align, holding key's n bytes and zeros after them.  NULL when out of memory. */
void *tps_pool_intern(tps_pool *p, const void *key, size_t n, size_t size, size_t align);

/* How many distinct items were interned. */
size_t tps_pool_count(const tps_pool *p);

/* FNV-1a, one value at a time: what a kind's hash builds on. */
#define TPS_POOL_HASH_SEED 0xcbf29ce484222325ull
static inline uint64_t tps_pool_mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

#endif
