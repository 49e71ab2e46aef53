#include "cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base.h"
#include "lib/engine.h"

tps_common_opts tps_common;

/* strtoull alone accepts " 5", "+5" and "-5" (as 2^64 - 5) and saturates silently on some
 * inputs; an option value is digits only, and at most TPS_OPT_UINT_MAX, so that a count added
 * to it (first + n layers, a rank + 1) cannot wrap. */
bool tps_parse_u64(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > TPS_OPT_UINT_MAX) return false;
    *out = v;
    return true;
}

bool tps_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {{"", 1},          {"B", 1},          {"KB", 1000ull},       {"MB", 1000000ull},
                 {"GB", 1000000000ull}, {"TB", 1000000000000ull}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20},
                 {"GiB", 1ull << 30},   {"TiB", 1ull << 40},   {"K", 1ull << 10},  {"M", 1ull << 20},
                 {"G", 1ull << 30}};
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            if (v > UINT64_MAX / units[i].mult) return false;
            *out = v * units[i].mult;
            return true;
        }
    }
    return false;
}

static const tps_opt *find_long(const tps_opt *opts, const char *name, size_t len)
{
    for (const tps_opt *o = opts; o->long_name; o++)
        if (strlen(o->long_name) == len && strncmp(o->long_name, name, len) == 0) return o;
    return NULL;
}

static const tps_opt *find_short(const tps_opt *opts, char c)
{
    for (const tps_opt *o = opts; o->long_name; o++)
        if (o->short_name == c) return o;
    return NULL;
}

/* Levenshtein distance, capped: names longer than 63 characters are never close. */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[64];
    if (la >= 64 || lb >= 64) return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

const char *tps_cli_suggest(const char *s, size_t len, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX, limit = len >= 6 ? 2 : 1;
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(names[i]);
        size_t d = len >= 2 && len < k && strncmp(names[i], s, len) == 0 ? 1 : edit_distance(s, len, names[i], k);
        if (d <= limit && d < best_d) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

static const char *suggest_option(const tps_opt *opts, const char *name, size_t len)
{
    const char *names[64];
    size_t n = 0;
    for (const tps_opt *o = opts; o->long_name && n < 64; o++) names[n++] = o->long_name;
    return tps_cli_suggest(name, len, names, n);
}

static int set_value(const tps_cmd *cmd, const tps_opt *o, const char *val)
{
    char *end;
    switch (o->kind) {
    case TPS_OPT_FLAG: *(bool *)o->target = true; return -1;
    case TPS_OPT_COUNT: (*(int *)o->target)++; return -1;
    case TPS_OPT_STRING: *(const char **)o->target = val; return -1;
    case TPS_OPT_UINT:
        if (tps_parse_u64(val, (uint64_t *)o->target)) return -1;
        if (strspn(val, "0123456789") == strlen(val) && *val)
            return tps_cli_usage(cmd->name, "--%s %s: too large (at most %llu)", o->long_name, val,
                                 (unsigned long long)TPS_OPT_UINT_MAX);
        return tps_cli_usage(cmd->name, "--%s expects a non-negative integer, not '%s'", o->long_name, val);
    case TPS_OPT_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        if (!errno && end != val && *end == '\0' && isfinite(v)) {
            *(double *)o->target = v;
            return -1;
        }
        return tps_cli_usage(cmd->name, "--%s expects a number, not '%s'", o->long_name, val);
    }
    case TPS_OPT_SIZE:
        if (tps_parse_size(val, (uint64_t *)o->target)) return -1;
        return tps_cli_usage(cmd->name, "--%s expects a size such as 4096, 500MB or 2GiB, not '%s'", o->long_name,
                             val);
    }
    return TPS_EXIT_USAGE;
}

static int unknown_option(const tps_cmd *cmd, const char *shown, const char *name, size_t len)
{
    const char *s = suggest_option(cmd->opts, name, len);
    if (s) return tps_cli_usage(cmd->name, "unknown option '%s'; did you mean '--%s'?", shown, s);
    return tps_cli_usage(cmd->name, "unknown option '%s'", shown);
}

int tps_cli_parse(const tps_cmd *cmd, int argc, char **argv, char **args, int *nargs)
{
    *nargs = 0;
    bool options_done = false;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (options_done || a[0] != '-' || a[1] == '\0') {
            if (*nargs >= cmd->max_args)
                return tps_cli_usage(cmd->name, "unexpected argument '%s' (usage: tpshard %s)", a, cmd->usage);
            args[(*nargs)++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            options_done = true;
            continue;
        }
        const tps_opt *o;
        const char *val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            o = find_long(cmd->opts, name, len);
            if (!o) {
                char shown[80];
                snprintf(shown, sizeof shown, "--%.*s", (int)(len < 60 ? len : 60), name);
                return unknown_option(cmd, shown, name, len);
            }
            if (eq) {
                if (!tps_opt_takes_value(o)) return tps_cli_usage(cmd->name, "option '--%s' takes no value", o->long_name);
                val = eq + 1;
            }
        } else {
            o = find_short(cmd->opts, a[1]);
            if (!o || a[2] != '\0') return unknown_option(cmd, a, a + 1, strlen(a + 1)); /* "-tp": --tp meant */
        }
        if (!val && tps_opt_takes_value(o)) {
            if (i + 1 >= argc)
                return tps_cli_usage(cmd->name, "option '--%s' needs a value (%s)", o->long_name,
                                     o->metavar ? o->metavar : "VALUE");
            val = argv[++i];
        }
        int rc = set_value(cmd, o, val);
        if (rc >= 0) return rc;
    }
    if (tps_common.help) return 0; /* the caller prints the help (help.h): parsing needs none of it */
    if (*nargs < cmd->min_args) return tps_cli_usage(cmd->name, "missing argument; usage: tpshard %s", cmd->usage);
    return -1;
}

/* The last error message printed: a --junit report's errored case carries it
 * (cmd/junit_report.c reads it; the reporting functions here know nothing of reports). */
static char last_error[4096];

const char *tps_cli_last_error(void) { return last_error; }

/* "tpshard CMD: message" without the newline. */
__attribute__((format(printf, 2, 0))) static void verrorf(const char *cmd, const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    fprintf(stderr, "tpshard %s: %s", cmd, last_error);
}

void tps_cli_errorf(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrorf(cmd, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int tps_cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrorf(cmd, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\ntpshard %s: see 'tpshard %s --help'\n", cmd, cmd);
    return TPS_EXIT_USAGE;
}

int tps_cli_exit_code(tps_status st)
{
    switch (st) {
    case TPS_OK: return TPS_EXIT_OK;
    case TPS_EMISMATCH: return TPS_EXIT_MISMATCH;
    case TPS_EARG: return TPS_EXIT_USAGE;
    case TPS_EINVALID: return TPS_EXIT_INVALID;
    case TPS_EIO: return TPS_EXIT_IO;
    case TPS_EBACKEND: return TPS_EXIT_BACKEND;
    case TPS_EINTERRUPTED: {
        int sig = tps_outdir_interrupted();
        return 128 + (sig ? sig : SIGINT);
    }
    }
    return TPS_EXIT_IO;
}

int tps_cli_report(const char *cmd, const tps_error *err)
{
    if (err->code == TPS_OK) return 0;
    snprintf(last_error, sizeof last_error, "%s", err->msg[0] ? err->msg : tps_status_name(err->code));
    fprintf(stderr, "tpshard %s: %s\n", cmd, last_error);
    if (err->code == TPS_EARG) fprintf(stderr, "tpshard %s: see 'tpshard %s --help'\n", cmd, cmd);
    return tps_cli_exit_code(err->code);
}

