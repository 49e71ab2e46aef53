/* Status codes and error messages shared by the whole library.
 *
 * A tps_status value is also the process exit code (DESIGN.md, "Exit codes"), so the CLI
 * can return the status of the failed call as is.  lib/ never exits or aborts on anything
 * that came from input: every fallible function returns a tps_status and, on failure,
 * fills a tps_error whose message names the file, the tensor and the byte offset where
 * they are known.  The first error is kept: later failures while cleaning up do not
 * overwrite it (NCCL checks.h style). */
#ifndef TPS_STATUS_H
#define TPS_STATUS_H

#include <stddef.h>

typedef enum tps_status {
    TPS_OK = 0,
    TPS_EMISMATCH = 1, /* a check or verification found a difference */
    TPS_EUSAGE = 2,    /* bad command line */
    TPS_EINVALID = 3,  /* malformed file, layout or manifest */
    TPS_EIO = 4,       /* I/O or resource failure: disk full, permission, out of memory */
    TPS_EBACKEND = 5   /* requested backend unavailable: no GPU, no NCCL, no MPI */
} tps_status;

#define TPS_ERROR_MSG_MAX 1024

typedef struct tps_error {
    tps_status code;
    char msg[TPS_ERROR_MSG_MAX];
} tps_error;

/* Resets err to "no error". err may be NULL. */
void tps_error_clear(tps_error *err);

/* Records an error unless one is already recorded; returns the status that is now in err
 * (the first one), or code when err is NULL.  printf-style message without trailing
 * newline. */
tps_status tps_fail(tps_error *err, tps_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like tps_fail with TPS_EIO and ": strerror(errnum)" appended. */
tps_status tps_fail_errno(tps_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Out of memory while handling what (a short noun phrase). */
tps_status tps_fail_oom(tps_error *err, const char *what);

/* Short human name of a status ("invalid input", ...). */
const char *tps_status_name(tps_status s);

/* Jump to the function's single cleanup label when a call fails; keeps the first status. */
#define TPS_CHECK(call)                 \
    do {                                \
        st = (call);                    \
        if (st != TPS_OK) goto cleanup; \
    } while (0)

#endif
