#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

tps_common_opts tps_common;

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

static int set_value(const tps_cmd *cmd, const tps_opt *o, const char *val)
{
    char *end;
    switch (o->kind) {
    case TPS_OPT_FLAG: *(bool *)o->target = true; return -1;
    case TPS_OPT_COUNT: (*(int *)o->target)++; return -1;
    case TPS_OPT_STRING: *(const char **)o->target = val; return -1;
    case TPS_OPT_UINT:
        errno = 0;
        if (val[0] >= '0' && val[0] <= '9') {
            unsigned long long v = strtoull(val, &end, 10);
            if (!errno && *end == '\0') {
                *(uint64_t *)o->target = v;
                return -1;
            }
        }
        tps_cli_errorf(cmd->name, "--%s expects a non-negative integer, not '%s'", o->long_name, val);
        return TPS_EUSAGE;
    case TPS_OPT_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        if (!errno && end != val && *end == '\0' && isfinite(v)) {
            *(double *)o->target = v;
            return -1;
        }
        tps_cli_errorf(cmd->name, "--%s expects a number, not '%s'", o->long_name, val);
        return TPS_EUSAGE;
    }
    case TPS_OPT_SIZE:
        if (tps_parse_size(val, (uint64_t *)o->target)) return -1;
        tps_cli_errorf(cmd->name, "--%s expects a size such as 4096, 500MB or 2GiB, not '%s'", o->long_name, val);
        return TPS_EUSAGE;
    }
    return TPS_EUSAGE;
}

static int usage_hint(const tps_cmd *cmd)
{
    fprintf(stderr, "Try 'tpshard %s --help'.\n", cmd->name);
    return TPS_EUSAGE;
}

int tps_cli_parse(const tps_cmd *cmd, int argc, char **argv, char **args, int *nargs)
{
    *nargs = 0;
    bool options_done = false;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (options_done || a[0] != '-' || a[1] == '\0') {
            if (*nargs >= cmd->max_args) {
                tps_cli_errorf(cmd->name, "unexpected argument '%s'", a);
                return usage_hint(cmd);
            }
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
                tps_cli_errorf(cmd->name, "unknown option '--%.*s'", (int)len, name);
                return usage_hint(cmd);
            }
            if (eq) {
                if (o->kind == TPS_OPT_FLAG || o->kind == TPS_OPT_COUNT) {
                    tps_cli_errorf(cmd->name, "option '--%s' takes no value", o->long_name);
                    return usage_hint(cmd);
                }
                val = eq + 1;
            }
        } else {
            o = find_short(cmd->opts, a[1]);
            if (!o || a[2] != '\0') {
                tps_cli_errorf(cmd->name, "unknown option '%s'", a);
                return usage_hint(cmd);
            }
        }
        if (!val && o->kind != TPS_OPT_FLAG && o->kind != TPS_OPT_COUNT) {
            if (i + 1 >= argc) {
                tps_cli_errorf(cmd->name, "option '--%s' needs a value (%s)", o->long_name,
                               o->metavar ? o->metavar : "VALUE");
                return usage_hint(cmd);
            }
            val = argv[++i];
        }
        int rc = set_value(cmd, o, val);
        if (rc >= 0) return usage_hint(cmd);
    }
    if (tps_common.help) {
        tps_cli_help(stdout, cmd);
        return 0;
    }
    if (*nargs < cmd->min_args) {
        tps_cli_errorf(cmd->name, "missing argument; usage: tpshard %s", cmd->usage);
        return usage_hint(cmd);
    }
    return -1;
}

void tps_cli_exit_codes(FILE *out)
{
    fputs("Exit codes:\n"
          "  0  success\n"
          "  1  a check or verification found a mismatch\n"
          "  2  usage error\n"
          "  3  invalid input (malformed file, layout or manifest)\n"
          "  4  I/O or resource failure (disk full, permission, out of memory)\n"
          "  5  backend unavailable (no GPU, no NCCL, no MPI) for a requested backend\n",
          out);
}

void tps_cli_help(FILE *out, const tps_cmd *cmd)
{
    fprintf(out, "Usage: tpshard %s\n\n%s\n", cmd->usage, cmd->summary);
    if (cmd->details) fprintf(out, "\n%s", cmd->details);
    fputs("\nOptions:\n", out);
    for (const tps_opt *o = cmd->opts; o->long_name; o++) {
        char left[64];
        int n = 0;
        if (o->short_name) n = snprintf(left, sizeof left, "-%c, ", o->short_name);
        else n = snprintf(left, sizeof left, "    ");
        bool takes = o->kind != TPS_OPT_FLAG && o->kind != TPS_OPT_COUNT;
        snprintf(left + n, sizeof left - (size_t)n, "--%s%s%s", o->long_name, takes ? " " : "",
                 takes ? (o->metavar ? o->metavar : "VALUE") : "");
        fprintf(out, "  %-28s %s\n", left, o->help);
    }
    fputc('\n', out);
    tps_cli_exit_codes(out);
}

void tps_cli_errorf(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "tpshard %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int tps_cli_report(const char *cmd, const tps_error *err)
{
    if (err->code == TPS_OK) return 0;
    fprintf(stderr, "tpshard %s: %s\n", cmd, err->msg[0] ? err->msg : tps_status_name(err->code));
    return (int)err->code;
}

/* "0,3,5" into a flag per rank; false on junk or a rank >= tp. */
bool tps_parse_rank_list(const char *s, uint64_t tp, bool *out)
{
    while (*s) {
        char *end;
        if (*s < '0' || *s > '9') return false;
        unsigned long long r = strtoull(s, &end, 10);
        if (r >= tp) return false;
        out[r] = true;
        s = end;
        if (*s == ',') s++;
        else if (*s) return false;
    }
    return true;
}
