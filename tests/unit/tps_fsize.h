/* A file-size limit for the tests of a writer's failure path: past it write() returns short,
 * then fails with EFBIG (SIGXFSZ ignored), the way a full disk fails with ENOSPC. */
#ifndef TPS_FSIZE_H
#define TPS_FSIZE_H

#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>

typedef struct tps_fsize_guard {
    struct rlimit old;
    void (*old_handler)(int);
} tps_fsize_guard;

/* Limits files to bytes; false (and nothing changed) when the limit cannot be set here. */
static inline bool tps_fsize_limit(tps_fsize_guard *g, rlim_t bytes)
{
    if (getrlimit(RLIMIT_FSIZE, &g->old) != 0) return false;
    struct rlimit lim = g->old;
    lim.rlim_cur = bytes;
    g->old_handler = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) return true;
    signal(SIGXFSZ, g->old_handler);
    return false;
}

static inline void tps_fsize_restore(const tps_fsize_guard *g)
{
    setrlimit(RLIMIT_FSIZE, &g->old);
    signal(SIGXFSZ, g->old_handler);
}

#endif
