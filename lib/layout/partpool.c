/* The partition pool (partpool.h): partitions in blocks that never move, found again by an
 * open-addressing table of pointers (load under one half; a hostile manifest with every
 * partition distinct costs a table as large as its count, never a quadratic search). */
#include "partpool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_PARTS 32

typedef struct block {
    struct block *next;
    size_t used;
    tps_partition part[BLOCK_PARTS];
} block;

struct tps_partpool {
    size_t refs;
    block *blocks;          /* the newest first */
    const tps_partition **table; /* NULL where empty */
    size_t cap, n;
};

tps_partpool *tps_partpool_new(void)
{
    tps_partpool *p = calloc(1, sizeof *p);
    if (p) p->refs = 1;
    return p;
}

tps_partpool *tps_partpool_ref(tps_partpool *p)
{
    p->refs++;
    return p;
}

void tps_partpool_unref(tps_partpool *p)
{
    if (!p || --p->refs) return;
    for (block *b = p->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(p->table);
    free(p);
}

size_t tps_partpool_count(const tps_partpool *p) { return p->n; }

/* Field by field, not memcmp: padding bytes inside the struct are unspecified. */
static bool same(const tps_partition *a, const tps_partition *b)
{
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

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

static size_t hash(const tps_partition *p)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the fields same() compares */
    h = mix(h, p->replicated);
    h = mix(h, (uint64_t)(int64_t)p->dim);
    h = mix(h, (uint64_t)(int64_t)p->nseg);
    h = mix(h, p->pad);
    h = mix(h, p->groups);
    h = mix(h, p->pad_multiple);
    h = mix(h, p->uneven);
    h = mix(h, p->block);
    h = mix(mix(h, p->owners), p->owner);
    for (int k = 0; k < TPS_MAX_SEGMENTS; k++) {
        const tps_segment *s = &p->seg[k];
        for (size_t c = 0; c < sizeof s->name; c++) h = mix(h, (unsigned char)s->name[c]);
        h = mix(mix(mix(h, s->length), s->unit), s->may_replicate);
    }
    return (size_t)(h ^ (h >> 32));
}

static const tps_partition **slot(const tps_partition **table, size_t cap, const tps_partition *part)
{
    for (size_t i = hash(part) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!table[i] || same(table[i], part)) return &table[i];
}

const tps_partition *tps_partpool_intern(tps_partpool *p, const tps_partition *part)
{
    if (2 * (p->n + 1) > p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 16;
        const tps_partition **t = cap <= SIZE_MAX / sizeof *t ? calloc(cap, sizeof *t) : NULL;
        if (!t) return NULL;
        for (size_t i = 0; i < p->cap; i++)
            if (p->table[i]) *slot(t, cap, p->table[i]) = p->table[i];
        free(p->table);
        p->table = t;
        p->cap = cap;
    }
    const tps_partition **at = slot(p->table, p->cap, part);
    if (*at) return *at;
    block *b = p->blocks;
    if (!b || b->used == BLOCK_PARTS) {
        if (!(b = malloc(sizeof *b))) return NULL;
        b->used = 0;
        b->next = p->blocks;
        p->blocks = b;
    }
    tps_partition *copy = &b->part[b->used++];
    *copy = *part;
    *at = copy;
    p->n++;
    return copy;
}
