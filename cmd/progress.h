/* One rate-limited progress line on stderr, only when stderr is a terminal and not -q:
 * bytes done and total, GB/s, ETA, the tensor in flight. */
#ifndef TPS_PROGRESS_H
#define TPS_PROGRESS_H

#include "lib/cut.h"

typedef struct tps_progress_state {
    const char *verb;
    double start, last;
    bool enabled, shown;
} tps_progress_state;

void tps_progress_begin(tps_progress_state *s, const char *verb);
void tps_progress_update(const tps_progress *p, void *state); /* a tps_cut_opts.progress callback */
void tps_progress_end(tps_progress_state *s);

#endif
