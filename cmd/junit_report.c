/* `--junit FILE` of check and verify: see junit_report.h. */
#include "junit_report.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "lib/base.h"
#include "lib/engine.h"

const char *tps_junit_path;

static struct {
    tps_junit *j;
    const char *cmd;
    struct timespec t0;
    bool silent, reported;
} s;

static double since_start(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - s.t0.tv_sec) + (double)(t.tv_nsec - s.t0.tv_nsec) / 1e9;
}

void tps_cli_junit_start(const char *cmd)
{
    s.cmd = cmd;
    clock_gettime(CLOCK_MONOTONIC, &s.t0);
}

void tps_cli_junit_silence(void) { s.silent = true; }

/* The suite, made on first use (only when a report was asked for). */
static tps_junit *suite(void)
{
    if (!tps_junit_path || s.silent) return NULL;
    if (!s.j) {
        char name[64];
        snprintf(name, sizeof name, "tpshard %s", s.cmd ? s.cmd : "run");
        s.j = tps_junit_new(name);
    }
    return s.j;
}

static const char *classname(void) { return s.cmd && strcmp(s.cmd, "verify") == 0 ? "tpshard.verify" : "tpshard.check"; }

int tps_cli_junit_finish(const char *input, int rc)
{
    if (!tps_junit_path || s.silent) return rc;
    tps_junit *j = suite();
    tps_buf b = TPS_BUF_INIT;
    tps_error err;
    tps_error_clear(&err);
    if (j && rc != 0 && rc != TPS_EXIT_MISMATCH) {
        /* The run stopped before it could judge everything: an errored case says why. */
        char name[512];
        snprintf(name, sizeof name, "%s %s", s.cmd ? s.cmd : "run", input ? input : "");
        size_t c = tps_junit_case(j, classname(), name, since_start());
        const char *why = tps_cli_last_error();
        char msg[4200];
        snprintf(msg, sizeof msg, "exit %d: %s", rc, why[0] ? why : "the run stopped");
        tps_junit_fail(j, c, TPS_JUNIT_ERROR, msg);
    }
    tps_junit_set_time(j, since_start());
    tps_status st = j ? tps_junit_render(j, &b, &err) : tps_fail_oom(&err, "the JUnit report");
    if (st == TPS_OK) st = tps_write_file_atomic(tps_junit_path, b.data, b.len, &err);
    tps_buf_release(&b);
    tps_junit_free(j);
    s.j = NULL;
    if (st == TPS_OK) return rc;
    /* A CI job that asked for a report must not pass without one. */
    int wrc = tps_cli_report(s.cmd ? s.cmd : "junit", &err);
    return rc == 0 || rc == TPS_EXIT_MISMATCH ? wrc : rc;
}

/* Whether msg names the file `name` as a path component: after the start or a '/', and
 * followed by the end, ':', a space or a quote. */
static bool names_file(const char *msg, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(msg, name); n && p; p = strstr(p + 1, name)) {
        char after = p[n];
        if ((p == msg || p[-1] == '/' || p[-1] == ' ' || p[-1] == '\'') &&
            (after == 0 || after == ':' || after == ' ' || after == '\'' || after == ','))
            return true;
    }
    return false;
}

/* The rank a finding blames: the last number of its first "rank N" or "ranks A and B"
 * (lib/engine/gather.c reports a replica that differs as "ranks <holder> and <differing>");
 * -1 when it names none. */
static long long rank_named(const char *msg)
{
    const char *p = strstr(msg, "rank");
    while (p && p > msg && isalnum((unsigned char)p[-1])) p = strstr(p + 4, "rank");
    if (!p) return -1;
    p += 4;
    if (*p == 's') p++;
    if (*p != ' ' || !isdigit((unsigned char)p[1])) return -1;
    long long r = strtoll(p + 1, (char **)&p, 10);
    if (strncmp(p, " and ", 5) == 0 && isdigit((unsigned char)p[5])) r = strtoll(p + 5, NULL, 10);
    return r;
}

void tps_cli_junit_check(const char *dir, const tps_manifest *m, char *const *findings, size_t n)
{
    tps_junit *j = suite();
    if (!j || s.reported) return;
    s.reported = true;
    tps_junit_property(j, "path", dir);
    size_t first = (size_t)-1;
    for (size_t k = 0; m && k < m->nfiles; k++) {
        if (!tps_manifest_holds(m, m->files[k].rank)) continue;
        char name[600];
        snprintf(name, sizeof name, "rank %llu: %s", (unsigned long long)m->files[k].rank, m->files[k].name);
        size_t c = tps_junit_case(j, "tpshard.check", name, 0);
        if (first == (size_t)-1) first = c;
    }
    size_t set = tps_junit_case(j, "tpshard.check", "set: manifest and tensors", 0);
    for (size_t i = 0; i < n; i++) {
        bool placed = false;
        long long r = rank_named(findings[i]);
        for (size_t k = 0, c = first; m && first != (size_t)-1 && k < m->nfiles; k++) {
            if (!tps_manifest_holds(m, m->files[k].rank)) continue;
            if (names_file(findings[i], m->files[k].name)) {
                tps_junit_fail(j, c, TPS_JUNIT_FAILURE, findings[i]);
                placed = true;
            }
            c++;
        }
        for (size_t k = 0, c = first; !placed && r >= 0 && m && first != (size_t)-1 && k < m->nfiles; k++) {
            if (!tps_manifest_holds(m, m->files[k].rank)) continue;
            if (m->files[k].rank == (unsigned long long)r) {
                tps_junit_fail(j, c, TPS_JUNIT_FAILURE, findings[i]);
                placed = true;
            }
            c++;
        }
        if (!placed) tps_junit_fail(j, set, TPS_JUNIT_FAILURE, findings[i]);
    }
}

void tps_cli_junit_property(const char *name, const char *value)
{
    tps_junit *j = suite();
    if (j) tps_junit_property(j, name, value);
}

/* "the attention stage (max abs err 0.5, rel err 0.1; rtol 0.016, atol 0.002): rank 1: ..." */
static void fail_stage(tps_junit *j, size_t c, const char *stage, const tps_verify_stage *st, int64_t culprit,
                       const char *detail)
{
    char msg[1600];
    bool names = strstr(detail, "rank") != NULL;
    char who[48] = "";
    if (culprit >= 0 && !names) snprintf(who, sizeof who, "rank %lld: ", (long long)culprit);
    snprintf(msg, sizeof msg, "mismatch in the %s stage (max abs err %.3g, rel err %.3g; rtol %.3g, atol %.3g): %s%s",
             stage, st ? st->max_abs : 0.0, st ? st->rel : 0.0, st ? st->rtol : 0.0, st ? st->atol : 0.0, who,
             detail);
    tps_junit_fail(j, c, TPS_JUNIT_FAILURE, msg);
}

void tps_cli_junit_layer(const tps_verify_result *r)
{
    tps_junit *j = suite();
    if (!j) return;
    char name[64];
    snprintf(name, sizeof name, "layer %llu", (unsigned long long)r->layer);
    size_t c = tps_junit_case(j, "tpshard.verify", name, r->seconds);
    if (!r->pass)
        fail_stage(j, c, tps_verify_stage_name(r->failed_stage),
                   r->failed_stage >= 0 && r->failed_stage < TPS_VSTAGE_COUNT ? &r->stage[r->failed_stage] : NULL,
                   r->culprit, r->detail);
}

void tps_cli_junit_whole(const tps_verify_whole *r)
{
    tps_junit *j = suite();
    if (!j) return;
    size_t c = tps_junit_case(j, "tpshard.verify", "whole model", r->seconds);
    if (!r->pass) {
        const char *f = r->failed ? r->failed : "logits";
        fail_stage(j, c, f, strcmp(f, "embedding") == 0 ? &r->embed_cmp : &r->logits_cmp, r->culprit, r->detail);
    }
}
