/* Status codes and error messages shared by the whole library.
 *
 * A tps_status says what kind of failure happened, in the library's terms; it is not a
 * process exit code.  The CLI maps it to one (cmd/cli.h, tps_cli_exit_code), so the
 * library knows nothing of command lines.  lib/ never exits or aborts on anything
 * that came from input: every fallible function returns a tps_status and, on failure,
 * fills a tps_error whose message names the file, the tensor and the byte offset where
 * they are known.  The first error is kept: later failures while cleaning up do not
 * overwrite it (NCCL checks.h style). */
#ifndef TPS_STATUS_H
#define TPS_STATUS_H

#include <stddef.h>

/* The values are ordered by how much of the run they condemn (an MPI job agrees on the
 * largest one its processes saw), and on purpose do not equal the exit codes. */
typedef enum tps_status {
    TPS_OK = 0,
    TPS_EMISMATCH = 1,   /* a check or verification found a difference */
    TPS_EINVALID = 2,    /* malformed file, layout or manifest */
    TPS_EARG = 3,        /* a caller's request cannot be met as asked: a tp beyond the bound, a
                            rank out of range, a file name template that collides */
    TPS_EIO = 4,         /* I/O or resource failure: disk full, permission, out of memory */
    TPS_EBACKEND = 5,    /* requested backend unavailable: no GPU, no NCCL, no MPI */
    TPS_EINTERRUPTED = 6 /* stopped by SIGINT/SIGTERM/SIGHUP (tps_outdir_interrupted says which) */
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
