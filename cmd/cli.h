/* The command-line layer: subcommand table, option tables, help text, error printing.
 *
 * Each subcommand lives in cmd/cmd_NAME.c and defines one option table; that table drives
 * both parsing and `--help`, so they cannot drift apart.  cmd/ never touches checkpoint
 * bytes: it parses options, calls lib/ and formats/, and turns a tps_status into the exit
 * code (the status values are the exit codes). */
#ifndef TPS_CLI_H
#define TPS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/base.h"

typedef enum tps_opt_kind {
    TPS_OPT_FLAG,   /* bool, set to true */
    TPS_OPT_STRING, /* const char * */
    TPS_OPT_UINT,   /* uint64_t, decimal, no sign */
    TPS_OPT_DOUBLE, /* double, finite */
    TPS_OPT_SIZE,   /* uint64_t from "5GB", "500MiB", "4096" */
    TPS_OPT_COUNT   /* int, incremented each time (-v -v) */
} tps_opt_kind;

typedef struct tps_opt {
    const char *long_name; /* without the leading "--" */
    char short_name;       /* 0 for none */
    tps_opt_kind kind;
    void *target;
    const char *metavar; /* shown in help for options that take a value */
    const char *help;
} tps_opt;

/* Whether an option takes a value (parsing and --help both ask). */
static inline bool tps_opt_takes_value(const tps_opt *o)
{
    return o->kind != TPS_OPT_FLAG && o->kind != TPS_OPT_COUNT;
}

/* Options every subcommand understands. */
typedef struct tps_common_opts {
    bool help;
    bool json;
    bool quiet;
    int verbose;
} tps_common_opts;

typedef struct tps_cmd {
    const char *name;
    const char *summary; /* one line for the command list */
    const char *usage;   /* "inspect PATH [--json]" */
    const char *details; /* paragraphs after the usage, or NULL */
    const tps_opt *opts; /* terminated by an entry with long_name NULL */
    int min_args, max_args;
    int (*run)(char **args, int nargs);
} tps_cmd;

extern const tps_cmd *const tps_commands[];
extern tps_common_opts tps_common;

/* Parses argv for cmd: options anywhere, "--" ends options; fills args with positionals.
 * Returns -1 to go on, or an exit code (0 when --help was given: the caller prints it,
 * help.h; 2 on a usage error with a hint). */
int tps_cli_parse(const tps_cmd *cmd, int argc, char **argv, char **args, int *nargs);

/* The closest of names[0..n) to s (an edit or two away, or s a prefix of it), or NULL. */
const char *tps_cli_suggest(const char *s, size_t len, const char *const *names, size_t n);

/* Exit codes (the table in README.md, "Exit codes", and in tpshard.1; tps_cli_exit_codes
 * prints it). */
enum {
    TPS_EXIT_OK = 0,
    TPS_EXIT_MISMATCH = 1, /* a check or verification found a difference */
    TPS_EXIT_USAGE = 2,    /* bad command line, or a request out of range */
    TPS_EXIT_INVALID = 3,  /* malformed file, layout or manifest */
    TPS_EXIT_IO = 4,       /* I/O or resource failure */
    TPS_EXIT_BACKEND = 5   /* requested backend unavailable */
    /* 128 + N: stopped by signal N after cleanup (130 SIGINT, 143 SIGTERM, 129 SIGHUP) */
};

/* The library's status as an exit code: TPS_EARG is a usage error; TPS_EINTERRUPTED is
 * 128 + the signal that stopped the run (SIGINT when none is recorded). */
int tps_cli_exit_code(tps_status st);

/* "tpshard CMD: message" on stderr; returns the status as an exit code. */
int tps_cli_report(const char *cmd, const tps_error *err);
void tps_cli_errorf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A usage error: the message, then "tpshard CMD: see 'tpshard CMD --help'"; returns 2. */
int tps_cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The message the last of these three printed ("" when none has): a --junit report's
 * errored case carries it. */
const char *tps_cli_last_error(void);

/* The largest value a TPS_OPT_UINT option takes: 2^63 - 1, far beyond any count a command
 * means, and small enough that adding another such value never overflows. */
#define TPS_OPT_UINT_MAX ((uint64_t)INT64_MAX)

/* Parses a decimal integer, digits only, at most TPS_OPT_UINT_MAX; false on anything else. */
bool tps_parse_u64(const char *s, uint64_t *out);

/* Parses "4", "500MB", "5GB" (decimal), "512MiB", "4GiB" (binary); false on junk/overflow. */
bool tps_parse_size(const char *s, uint64_t *out);


#define TPS_COMMON_OPTS                                                               \
    {"help", 'h', TPS_OPT_FLAG, &tps_common.help, NULL, "this help (-v: all)"},       \
    {"quiet", 'q', TPS_OPT_FLAG, &tps_common.quiet, NULL, "errors only"},             \
    {"verbose", 'v', TPS_OPT_COUNT, &tps_common.verbose, NULL, "more"}

#define TPS_OPTS_END {NULL, 0, TPS_OPT_FLAG, NULL, NULL, NULL}

#endif
