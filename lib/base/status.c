#include "status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void tps_error_clear(tps_error *err)
{
    if (!err) return;
    err->code = TPS_OK;
    err->msg[0] = '\0';
}

static tps_status record(tps_error *err, tps_status code, const char *suffix, const char *fmt, va_list ap)
{
    if (!err) return code;
    if (err->code != TPS_OK) return err->code; /* keep the first error */
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    if (suffix) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n, ": %s", suffix);
    }
    return code;
}

tps_status tps_fail(tps_error *err, tps_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tps_status st = record(err, code, NULL, fmt, ap);
    va_end(ap);
    return st;
}

tps_status tps_fail_errno(tps_error *err, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tps_status st = record(err, TPS_EIO, strerror(errnum), fmt, ap);
    va_end(ap);
    return st;
}

tps_status tps_fail_oom(tps_error *err, const char *what)
{
    return tps_fail(err, TPS_EIO, "out of memory while %s", what);
}

const char *tps_status_name(tps_status s)
{
    switch (s) {
    case TPS_OK: return "success";
    case TPS_EMISMATCH: return "mismatch";
    case TPS_EARG: return "request out of range";
    case TPS_EINVALID: return "invalid input";
    case TPS_EIO: return "I/O or resource failure";
    case TPS_EBACKEND: return "backend unavailable";
    case TPS_EINTERRUPTED: return "interrupted";
    }
    return "unknown status";
}
