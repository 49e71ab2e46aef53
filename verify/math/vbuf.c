/* Mapped tensor bytes; see vbuf.h. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vbuf.h"

#ifndef MAP_POPULATE /* Linux's; elsewhere the pages fault in as the math reads them */
#define MAP_POPULATE 0
#endif

typedef struct vmap {
    void *data, *base;
    size_t len;
    bool anon;  /* tps_vbuf_alloc's (else a file's) */
    bool kept;  /* freed while keeping: idle, to be handed out again */
} vmap;

/* From this size a buffer is its own mapping, unmapped when freed: malloc's arenas keep
 * what a thread freed for that thread, so the chunks eight rank threads stream the LM head
 * and embedding through stayed resident under the layers that came after. */
#define VBUF_MAPPED ((size_t)1 << 20)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static vmap *maps;
static size_t nmaps, cap;
static bool keeping;

/* Records a mapping for tps_vbuf_free; false (nothing recorded) when out of memory. */
static bool record(void *data, void *base, size_t len, bool anon)
{
    pthread_mutex_lock(&mu);
    if (nmaps == cap) {
        size_t nc = cap ? 2 * cap : 64;
        vmap *g = realloc(maps, nc * sizeof *g);
        if (g) maps = g, cap = nc;
    }
    bool kept = nmaps < cap;
    if (kept) maps[nmaps++] = (vmap){data, base, len, anon, false};
    pthread_mutex_unlock(&mu);
    return kept;
}

void *tps_vbuf_alloc(size_t n)
{
    if (n < VBUF_MAPPED) return malloc(n ? n : 1);
    pthread_mutex_lock(&mu);
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < nmaps; i++) /* the smallest kept one that fits */
        if (maps[i].kept && maps[i].len >= n && (best == SIZE_MAX || maps[i].len < maps[best].len)) best = i;
    void *reused = NULL;
    if (best != SIZE_MAX) {
        maps[best].kept = false;
        reused = maps[best].data;
    }
    pthread_mutex_unlock(&mu);
    if (reused) return reused;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (record(p, p, n, true)) return p;
    munmap(p, n);
    return NULL;
}

void *tps_vbuf_map(int fd, uint64_t off, size_t len)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (fd < 0 || !len || pg <= 0) return NULL;
    size_t lead = (size_t)(off % (uint64_t)pg);
    if (len > SIZE_MAX - lead) return NULL;
    /* past the file's end a mapping faults (SIGBUS) where a read reports a short file */
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 0 || off > (uint64_t)sb.st_size || len > (uint64_t)sb.st_size - off)
        return NULL;
    /* Populated read-only: a writable private mapping is populated by write faults, which copy
     * every page (the copy this saves).  Writable after: a write copies only its page. */
    void *base = mmap(NULL, len + lead, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, (off_t)(off - lead));
    if (base == MAP_FAILED) return NULL;
    if (mprotect(base, len + lead, PROT_READ | PROT_WRITE) != 0) {
        munmap(base, len + lead);
        return NULL;
    }
    void *data = (unsigned char *)base + lead;
    if (record(data, base, len + lead, false)) return data;
    munmap(base, len + lead);
    return NULL;
}

void tps_vbuf_free(void *p)
{
    if (!p) return;
    vmap m = {NULL, NULL, 0, false, false};
    bool kept = false;
    pthread_mutex_lock(&mu);
    for (size_t i = nmaps; i-- > 0;)
        if (maps[i].data == p && !maps[i].kept) {
            kept = keeping && maps[i].anon;
            if (kept) {
                maps[i].kept = true;
            } else {
                m = maps[i];
                maps[i] = maps[--nmaps];
            }
            break;
        }
    pthread_mutex_unlock(&mu);
    if (kept) return;
    if (m.base) munmap(m.base, m.len);
    else free(p);
}

void tps_vbuf_keep(void)
{
    pthread_mutex_lock(&mu);
    keeping = true;
    pthread_mutex_unlock(&mu);
}

void tps_vbuf_trim(void)
{
    pthread_mutex_lock(&mu);
    keeping = false;
    size_t k = 0;
    for (size_t i = 0; i < nmaps; i++) {
        if (maps[i].kept) munmap(maps[i].base, maps[i].len);
        else maps[k++] = maps[i];
    }
    nmaps = k;
    pthread_mutex_unlock(&mu);
}
