/* What long operations show while they run.  On a terminal (stderr), unless -q: one progress
 * line, redrawn at most five times a second, with bytes done and total, GB/s, the ETA and
 * the tensor in flight; it is erased when the operation ends.  Nothing when stderr is not
 * a terminal.  TPSHARD_PROGRESS_FD=N sends the same updates as JSON lines to descriptor N
 * instead (the Python API's progress callback, README "Python API").  With -v, each output file is listed on stdout as it completes. */
#ifndef TPS_PROGRESS_H
#define TPS_PROGRESS_H

#include "lib/engine.h"

typedef struct tps_progress_state {
    const char *verb;
    double start, last;
    bool enabled, shown;
    int fd; /* TPSHARD_PROGRESS_FD: JSON lines there instead of the terminal line; -1: none */
} tps_progress_state;

void tps_progress_begin(tps_progress_state *s, const char *verb);
void tps_progress_update(const tps_progress *p, void *state); /* a tps_cut_opts.progress callback */
/* A tps_cut_opts.file_done callback (state: the tps_progress_state): with -v, prints
 * "wrote NAME (SIZE)". */
void tps_progress_file_done(const char *name, uint64_t bytes, void *state);
/* Draws the line now, whatever the rate limit: for a step that starts and then runs for
 * seconds without updates (a verify layer and its stages), so its name stays on screen. */
void tps_progress_show(const tps_progress *p, tps_progress_state *s);
/* Erases the line before the command prints on stdout; the next update draws it again. */
void tps_progress_suspend(tps_progress_state *s);
void tps_progress_end(tps_progress_state *s);

#endif
