/* The partition pool (partpool.h): the pool's kind for partitions. */
#include "partpool.h"

#include <stdalign.h>
#include <stdint.h>
#include <string.h>

/* Field by field, not memcmp: padding bytes inside the struct are unspecified. */
static bool same(const void *item, const void *key, size_t n)
{
    const tps_partition *a = item, *b = key;
    (void)n;
    if (a->replicated != b->replicated || a->dim != b->dim || a->nseg != b->nseg || a->pad != b->pad ||
        a->groups != b->groups || a->pad_multiple != b->pad_multiple || a->block != b->block ||
        a->uneven != b->uneven || a->owners != b->owners || a->owner != b->owner)
        return false;
    for (int k = 0; k < TPS_MAX_SEGMENTS; k++) {
        const tps_segment *x = &a->seg[k], *y = &b->seg[k];
        if (memcmp(x->name, y->name, sizeof x->name) || x->length != y->length || x->unit != y->unit ||
            x->may_replicate != y->may_replicate)
            return false;
    }
    return true;
}

static uint64_t hash(const void *key, size_t n)
{
    const tps_partition *p = key;
    uint64_t h = TPS_POOL_HASH_SEED; /* over the fields same() compares */
    (void)n;
    h = tps_pool_mix(h, p->replicated);
    h = tps_pool_mix(h, (uint64_t)(int64_t)p->dim);
    h = tps_pool_mix(h, (uint64_t)(int64_t)p->nseg);
    h = tps_pool_mix(h, p->pad);
    h = tps_pool_mix(h, p->groups);
    h = tps_pool_mix(h, p->pad_multiple);
    h = tps_pool_mix(h, p->uneven);
    h = tps_pool_mix(h, p->block);
    h = tps_pool_mix(tps_pool_mix(h, p->owners), p->owner);
    for (int k = 0; k < TPS_MAX_SEGMENTS; k++) {
        const tps_segment *s = &p->seg[k];
        for (size_t c = 0; c < sizeof s->name; c++) h = tps_pool_mix(h, (unsigned char)s->name[c]);
        h = tps_pool_mix(tps_pool_mix(tps_pool_mix(h, s->length), s->unit), s->may_replicate);
    }
    return h;
}

static const tps_pool_kind partitions = {hash, same};

tps_partpool *tps_partpool_new(void) { return tps_pool_new(&partitions); }

const tps_partition *tps_partpool_intern(tps_partpool *p, const tps_partition *part)
{
    return tps_pool_intern(p, part, sizeof *part, sizeof *part, alignof(tps_partition));
}
