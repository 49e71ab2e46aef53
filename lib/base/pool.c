/* The pool (pool.h): a chain of blocks that only grows, and an open-addressing table of the
 * interned items. */
#include "pool.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_SIZE (64u << 10)

typedef struct block {
    struct block *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
} block;

/* An interned item and its key's hash, kept so that growing the table hashes nothing again. */
typedef struct entry {
    void *item;
    uint64_t hash;
} entry;

struct tps_pool {
    size_t refs;
    const tps_pool_kind *kind;
    block *blocks; /* the newest first: where items go */
    entry *table;  /* interned items, NULL where empty */
    size_t cap, n; /* table slots (a power of two, or 0) and items in it */
};

tps_pool *tps_pool_new(const tps_pool_kind *kind)
{
    tps_pool *p = calloc(1, sizeof *p);
    if (p) {
        p->refs = 1;
        p->kind = kind;
    }
    return p;
}

tps_pool *tps_pool_ref(tps_pool *p)
{
    p->refs++;
    return p;
}

void tps_pool_unref(tps_pool *p)
{
    if (!p || --p->refs) return;
    for (block *b = p->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(p->table);
    free(p);
}

size_t tps_pool_count(const tps_pool *p) { return p->n; }

void *tps_pool_alloc(tps_pool *p, size_t size, size_t align)
{
    if (size >= SIZE_MAX - sizeof(block) - BLOCK_SIZE) return NULL;
    block *b = p->blocks;
    size_t at = b ? (b->used + align - 1) & ~(align - 1) : 0;
    if (!b || at > b->cap || b->cap - at < size) {
        /* An item larger than a quarter block gets a block of its own, behind the current
         * one, so the current block's free space is not thrown away. */
        size_t cap = size > BLOCK_SIZE / 4 ? size : BLOCK_SIZE;
        block *nb = malloc(sizeof *nb + cap);
        if (!nb) return NULL;
        nb->used = 0;
        nb->cap = cap;
        if (b && cap != BLOCK_SIZE) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            p->blocks = nb;
        }
        b = nb;
        at = 0;
    }
    b->used = at + size;
    return b->data + at;
}

/* The slot of key (hash h): its equal item's, or the empty one where it goes (key NULL: the
 * empty one, for an item moved to a grown table, equal to none there). */
static entry *slot(const tps_pool *p, entry *table, size_t cap, uint64_t h, const void *key, size_t n)
{
    for (size_t i = (size_t)(h ^ (h >> 32)) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!table[i].item || (key && table[i].hash == h && p->kind->same(table[i].item, key, n))) return &table[i];
}

void *tps_pool_intern(tps_pool *p, const void *key, size_t n, size_t size, size_t align)
{
    if (2 * (p->n + 1) > p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        entry *t = cap <= SIZE_MAX / sizeof *t ? calloc(cap, sizeof *t) : NULL;
        if (!t) return NULL;
        for (size_t i = 0; i < p->cap; i++)
            if (p->table[i].item) *slot(p, t, cap, p->table[i].hash, NULL, 0) = p->table[i];
        free(p->table);
        p->table = t;
        p->cap = cap;
    }
    uint64_t h = p->kind->hash(key, n);
    entry *at = slot(p, p->table, p->cap, h, key, n);
    if (!at->item) {
        unsigned char *d = tps_pool_alloc(p, size, align);
        if (!d) return NULL;
        memcpy(d, key, n);
        memset(d + n, 0, size - n);
        at->item = d;
        at->hash = h;
        p->n++;
    }
    return at->item;
}
