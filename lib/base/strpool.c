/* The string pool (strpool.h): a chain of blocks that only grows, and an open-addressing
 * table of the interned strings (its load stays under one half, so a look-up is a few
 * probes; a hostile manifest with all-distinct rules costs a table as large as its count). */
#include "strpool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_SIZE (64u << 10)

typedef struct block {
    struct block *next;
    size_t used, cap;
    char data[];
} block;

struct tps_strpool {
    size_t refs;
    block *blocks; /* the newest first: where strings go */
    char **table;  /* interned strings, NULL where empty */
    size_t cap, n; /* table slots (a power of two, or 0) and strings in it */
};

tps_strpool *tps_strpool_new(void)
{
    tps_strpool *p = calloc(1, sizeof *p);
    if (p) p->refs = 1;
    return p;
}

tps_strpool *tps_strpool_ref(tps_strpool *p)
{
    p->refs++;
    return p;
}

char *tps_strpool_add(tps_strpool *p, const char *s, size_t n)
{
    if (n >= SIZE_MAX - sizeof(block) - BLOCK_SIZE) return NULL;
    block *b = p->blocks;
    if (!b || b->cap - b->used < n + 1) {
        /* A string longer than a block gets one of its own, behind the current one, so the
         * current block's free space is not thrown away. */
        size_t cap = n + 1 > BLOCK_SIZE / 4 ? n + 1 : BLOCK_SIZE;
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
    }
    char *d = b->data + b->used;
    memcpy(d, s, n);
    d[n] = '\0';
    b->used += n + 1;
    return d;
}

static size_t hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return (size_t)(h ^ (h >> 32));
}

static char **slot(char **table, size_t cap, const char *s, size_t n)
{
    for (size_t i = hash(s, n) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!table[i] || (strlen(table[i]) == n && memcmp(table[i], s, n) == 0)) return &table[i];
}

char *tps_strpool_intern(tps_strpool *p, const char *s, size_t n)
{
    if (2 * (p->n + 1) > p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        char **t = cap <= SIZE_MAX / sizeof *t ? calloc(cap, sizeof *t) : NULL;
        if (!t) return NULL;
        for (size_t i = 0; i < p->cap; i++)
            if (p->table[i]) *slot(t, cap, p->table[i], strlen(p->table[i])) = p->table[i];
        free(p->table);
        p->table = t;
        p->cap = cap;
    }
    char **at = slot(p->table, p->cap, s, n);
    if (!*at) {
        if (!(*at = tps_strpool_add(p, s, n))) return NULL;
        p->n++;
    }
    return *at;
}

void tps_strpool_unref(tps_strpool *p)
{
    if (!p || --p->refs) return;
    for (block *b = p->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(p->table);
    free(p);
}
