#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tps_progress_begin(tps_progress_state *s, const char *verb)
{
    s->verb = verb;
    s->start = s->last = now();
    s->enabled = !tps_common.quiet && isatty(STDERR_FILENO);
    s->shown = false;
}

void tps_progress_update(const tps_progress *p, void *state)
{
    tps_progress_state *s = state;
    if (!s->enabled) return;
    double t = now();
    if (t - s->last < 0.2 && p->done < p->total) return; /* at most 5 updates a second */
    s->last = t;
    double el = t - s->start, rate = el > 0 ? (double)p->done / el : 0;
    double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0;
    fprintf(stderr, "\r\033[K%s %.2f / %.2f GB  %.2f GB/s  ETA %.0fs  %.40s", s->verb, (double)p->done / 1e9,
            (double)p->total / 1e9, rate / 1e9, eta, p->tensor ? p->tensor : "");
    s->shown = true;
}

void tps_progress_end(tps_progress_state *s)
{
    if (s->shown) fputs("\r\033[K", stderr);
}
