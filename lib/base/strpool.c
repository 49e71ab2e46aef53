/* The string pool (strpool.h): the pool's kind for strings. */
#include "strpool.h"

#include <stdint.h>
#include <string.h>

static uint64_t hash(const void *key, size_t n)
{
    const unsigned char *s = key;
    uint64_t h = TPS_POOL_HASH_SEED;
    for (size_t i = 0; i < n; i++) h = tps_pool_mix(h, s[i]);
    return h;
}

static bool same(const void *item, const void *key, size_t n)
{
    return strlen(item) == n && memcmp(item, key, n) == 0;
}

static const tps_pool_kind strings = {hash, same};

tps_strpool *tps_strpool_new(void) { return tps_pool_new(&strings); }

char *tps_strpool_add(tps_strpool *p, const char *s, size_t n)
{
    char *d = n < SIZE_MAX ? tps_pool_alloc(p, n + 1, 1) : NULL;
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *tps_strpool_intern(tps_strpool *p, const char *s, size_t n)
{
    return n < SIZE_MAX ? tps_pool_intern(p, s, n, n + 1, 1) : NULL;
}
