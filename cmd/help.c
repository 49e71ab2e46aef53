/* --help from each subcommand's option table (cli.h): the usage line, the options aligned
 * in a column, the details, the exit codes; rendered to fit one screen where it can.  Apart
 * from cli.c, which parses the same tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "help.h"
#include "lib/base.h"

void tps_cli_exit_codes(FILE *out, bool full)
{
    if (!full) {
        fputs("Exit: 0 ok, 1 mismatch, 2 usage, 3 invalid input, 4 I/O, 5 no backend, 128+sig\n", out);
        return;
    }
    fputs("Exit codes (and 130, 143: stopped by SIGINT, SIGTERM, after cleanup):\n"
          "  0  success\n"
          "  1  a check or verification found a mismatch\n"
          "  2  usage error\n"
          "  3  invalid input (malformed file, layout or manifest)\n"
          "  4  I/O or resource failure (disk full, permission, out of memory)\n"
          "  5  backend unavailable (no GPU, no NCCL, no MPI) for a requested backend\n",
          out);
}

#define HELP_WIDTH 80
#define HELP_LINES 24

/* Writes text word-wrapped to HELP_WIDTH, the first line continuing at column col, later
 * lines indented by indent.  With groups, a bracketed group ("(--layout FILE | --preset
 * NAME)") is kept on one line where it fits, as usage lines read best that way. */
static void wrap(FILE *out, int col, int indent, const char *text, bool groups)
{
    bool first = true;
    for (const char *p = text; *p;) {
        while (*p == ' ' || *p == '\n') p++;
        if (!*p) break;
        size_t w = 0;
        int depth = 0;
        while (p[w] && p[w] != '\n' && (p[w] != ' ' || (groups && depth > 0))) {
            if (p[w] == '(' || p[w] == '[') depth++;
            if ((p[w] == ')' || p[w] == ']') && depth > 0) depth--;
            w++;
        }
        if (!first && col + 1 + (int)w > HELP_WIDTH) {
            fprintf(out, "\n%*s", indent, "");
            col = indent;
        } else if (!first) {
            fputc(' ', out);
            col++;
        }
        fwrite(p, 1, w, out);
        col += (int)w;
        p += w;
        first = false;
    }
    fputc('\n', out);
}

/* Details are paragraphs of prose, re-flowed to the width; a line that starts with a space
 * is an example and stays as written. */
static void print_details(FILE *out, const char *d)
{
    tps_buf para = TPS_BUF_INIT;
    while (*d) {
        size_t n = strcspn(d, "\n");
        bool literal = d[0] == ' ', blank = n == 0;
        if ((literal || blank) && para.len) {
            if (tps_buf_cstr(&para)) wrap(out, 0, 0, para.data, false);
            tps_buf_reset(&para);
        }
        if (literal || blank) fprintf(out, "%.*s\n", (int)n, d);
        else tps_buf_printf(&para, "%s%.*s", para.len ? " " : "", (int)n, d);
        d += n + (d[n] == '\n');
    }
    if (para.len && tps_buf_cstr(&para)) wrap(out, 0, 0, para.data, false);
    tps_buf_release(&para);
}

void tps_cli_wrap(FILE *out, int col, int indent, const char *text)
{
    wrap(out, col, indent, text, false);
}

static bool is_common(const tps_opt *o)
{
    return o->target == &tps_common.help || o->target == &tps_common.quiet || o->target == &tps_common.verbose;
}

/* The usage line; one that would wrap drops its optional [...] groups for "[OPTIONS]",
 * since the options are listed below it anyway. */
static void print_usage(FILE *out, const tps_cmd *cmd)
{
    int col = fprintf(out, "Usage: tpshard ");
    if (col + strlen(cmd->usage) <= HELP_WIDTH) {
        fprintf(out, "%s\n", cmd->usage);
        return;
    }
    tps_buf u = TPS_BUF_INIT;
    int depth = 0;
    for (const char *p = cmd->usage; *p; p++) {
        if (*p == '[' && depth++ == 0) {
            while (u.len && u.data[u.len - 1] == ' ') u.len--;
            continue;
        }
        if (depth) {
            if (*p == ']') depth--;
            continue;
        }
        tps_buf_putc(&u, *p);
    }
    tps_buf_puts(&u, " [OPTIONS]");
    const char *text = tps_buf_cstr(&u);
    wrap(out, col, col + (int)strlen(cmd->name) + 1, text ? text : cmd->usage, true);
    tps_buf_release(&u);
}

/* width: at most this many columns for the option names; a longer name pushes its own help
 * text right rather than every option's. */
static void print_help(FILE *out, const tps_cmd *cmd, bool details, int width_cap)
{
    print_usage(out, cmd);
    wrap(out, 0, 0, cmd->summary, false);
    if (details && cmd->details) {
        fputc('\n', out);
        print_details(out, cmd->details);
    }
    fputs("\nOptions:\n", out);
    bool shorts = false;
    for (const tps_opt *o = cmd->opts; o->long_name; o++) shorts |= !is_common(o) && o->short_name != 0;
    int width = 0;
    char left[96];
    for (const tps_opt *o = cmd->opts; o->long_name; o++) {
        if (is_common(o)) continue;
        const char *meta = tps_opt_takes_value(o) ? (o->metavar ? o->metavar : "VALUE") : NULL;
        int w = snprintf(left, sizeof left, "%s--%s%s%s", shorts ? "    " : "", o->long_name, meta ? " " : "",
                         meta ? meta : "");
        if (w > width && w <= width_cap) width = w;
    }
    for (const tps_opt *o = cmd->opts; o->long_name; o++) {
        if (is_common(o)) continue;
        const char *meta = tps_opt_takes_value(o) ? (o->metavar ? o->metavar : "VALUE") : NULL;
        if (shorts && o->short_name)
            snprintf(left, sizeof left, "-%c, --%s%s%s", o->short_name, o->long_name, meta ? " " : "", meta ? meta : "");
        else
            snprintf(left, sizeof left, "%s--%s%s%s", shorts ? "    " : "", o->long_name, meta ? " " : "",
                     meta ? meta : "");
        int n = fprintf(out, "  %-*s  ", width, left);
        wrap(out, n, 4 + width, o->help, false);
    }
    const char *sep = "  ";
    for (const tps_opt *o = cmd->opts; o->long_name; o++)
        if (is_common(o)) {
            fprintf(out, "%s-%c, --%s: %s", sep, o->short_name, o->long_name, o->help);
            sep = "; ";
        }
    fputs("\n\n", out);
    tps_cli_exit_codes(out, false);
}

/* Renders the help into a string and counts its lines; NULL when out of memory. */
static char *render(const tps_cmd *cmd, bool details, int width_cap, size_t *lines)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) return NULL;
    print_help(mem, cmd, details, width_cap);
    if (fclose(mem) != 0) {
        free(text);
        return NULL;
    }
    *lines = 0;
    for (size_t i = 0; i < len; i++) *lines += text[i] == '\n';
    return text;
}

void tps_cli_help(FILE *out, const tps_cmd *cmd, bool verbose)
{
    /* The first rendering that fits one screen: with the details, then without them (the
     * common options line says -v shows them), with the option column narrowed last, as
     * aligned help reads best.  Help that fits no screen (-v's details) gains nothing from a
     * narrowed column, which only pushes the longer names' text out of line: it is printed
     * with the widest. */
    static const int caps[] = {26, 22, 18, 16};
    char *text = NULL;
    for (int details = 1; details >= 0; details--) {
        if (!details && verbose) break;
        for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
            size_t lines;
            free(text);
            text = render(cmd, details || !cmd->details, caps[k], &lines);
            if (!text || lines <= HELP_LINES) goto print;
        }
    }
    size_t lines;
    free(text);
    text = render(cmd, verbose || !cmd->details, caps[0], &lines);
print:
    if (text) fputs(text, out);
    else print_help(out, cmd, true, caps[0]);
    free(text);
}
