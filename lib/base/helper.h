/* A second thread that runs one posted job at a time while the poster does its own share of
 * the same work: the copy engine hands it half of the ranks of each chunk, so that writing
 * (for tmpfs and the page cache, the kernel copying into new pages: CPU work) uses both
 * cores.  The poster must not touch what the job touches until tps_helper_wait returns. */
#ifndef TPS_HELPER_H
#define TPS_HELPER_H

#include "status.h"

typedef tps_status (*tps_job_fn)(void *arg, tps_error *err);

typedef struct tps_helper tps_helper;

tps_status tps_helper_start(tps_helper **out, tps_error *err);
/* Hands fn(arg) to the thread; one job at a time (wait before posting the next). */
void tps_helper_post(tps_helper *h, tps_job_fn fn, void *arg);
/* Waits for the posted job; its status, with its message in err when it failed. */
tps_status tps_helper_wait(tps_helper *h, tps_error *err);
/* Ends the thread (after any posted job) and frees it; accepts NULL. */
void tps_helper_stop(tps_helper *h);

#endif
