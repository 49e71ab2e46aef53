/* JUnit XML reports: see junit.h. */
#include "junit.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct jcase {
    char *classname, *name;
    double seconds;
    tps_junit_outcome outcome;
    char *message; /* the first finding */
    tps_buf text;  /* every finding, one a line */
} jcase;

typedef struct jprop {
    char *name, *value;
} jprop;

struct tps_junit {
    char *name;
    time_t when;
    char host[256];
    double seconds;
    jcase *cases;
    size_t ncases, cap;
    jprop *props;
    size_t nprops, pcap;
    bool oom;
};

static char *dup_or_oom(tps_junit *j, const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d) j->oom = true;
    return d;
}

tps_junit *tps_junit_new(const char *name)
{
    tps_junit *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->name = strdup(name && *name ? name : "tpshard");
    if (!j->name) {
        free(j);
        return NULL;
    }
    j->when = time(NULL);
    if (gethostname(j->host, sizeof j->host - 1) != 0 || !j->host[0]) strcpy(j->host, "localhost");
    return j;
}

void tps_junit_free(tps_junit *j)
{
    if (!j) return;
    for (size_t i = 0; i < j->ncases; i++) {
        free(j->cases[i].classname);
        free(j->cases[i].name);
        free(j->cases[i].message);
        tps_buf_release(&j->cases[i].text);
    }
    for (size_t i = 0; i < j->nprops; i++) {
        free(j->props[i].name);
        free(j->props[i].value);
    }
    free(j->cases);
    free(j->props);
    free(j->name);
    free(j);
}

void tps_junit_set_origin(tps_junit *j, time_t when, const char *hostname)
{
    if (!j) return;
    j->when = when;
    snprintf(j->host, sizeof j->host, "%s", hostname && *hostname ? hostname : "localhost");
}

void tps_junit_set_time(tps_junit *j, double seconds)
{
    if (j) j->seconds = seconds;
}

void tps_junit_property(tps_junit *j, const char *name, const char *value)
{
    if (!j || !name || !*name) return;
    if (j->nprops == j->pcap) {
        size_t cap = j->pcap ? j->pcap * 2 : 8;
        jprop *p = realloc(j->props, cap * sizeof *p);
        if (!p) {
            j->oom = true;
            return;
        }
        j->props = p;
        j->pcap = cap;
    }
    jprop *p = &j->props[j->nprops++];
    p->name = dup_or_oom(j, name);
    p->value = dup_or_oom(j, value);
}

size_t tps_junit_case(tps_junit *j, const char *classname, const char *name, double seconds)
{
    if (!j) return (size_t)-1;
    if (j->ncases == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 16;
        jcase *c = realloc(j->cases, cap * sizeof *c);
        if (!c) {
            j->oom = true;
            return (size_t)-1;
        }
        j->cases = c;
        j->cap = cap;
    }
    jcase *c = &j->cases[j->ncases++];
    memset(c, 0, sizeof *c);
    c->classname = dup_or_oom(j, classname && *classname ? classname : "tpshard");
    c->name = dup_or_oom(j, name && *name ? name : "?");
    c->seconds = seconds;
    return j->ncases - 1;
}

/* Which outcome a case keeps when it gets several: the one that says most is wrong. */
static int outcome_rank(tps_junit_outcome o)
{
    return o == TPS_JUNIT_FAILURE ? 3 : o == TPS_JUNIT_ERROR ? 2 : o == TPS_JUNIT_SKIPPED ? 1 : 0;
}

void tps_junit_fail(tps_junit *j, size_t idx, tps_junit_outcome outcome, const char *msg)
{
    if (!j || idx >= j->ncases) return;
    jcase *c = &j->cases[idx];
    if (outcome_rank(outcome) > outcome_rank(c->outcome)) c->outcome = outcome;
    if (!msg) return;
    if (!c->message) c->message = dup_or_oom(j, msg);
    tps_buf_puts(&c->text, msg);
    tps_buf_putc(&c->text, '\n');
    if (c->text.oom) j->oom = true;
}

size_t tps_junit_find(const tps_junit *j, const char *name)
{
    for (size_t i = 0; j && name && i < j->ncases; i++)
        if (j->cases[i].name && strcmp(j->cases[i].name, name) == 0) return i;
    return (size_t)-1;
}

size_t tps_junit_count(const tps_junit *j, tps_junit_outcome outcome)
{
    size_t n = 0;
    for (size_t i = 0; j && i < j->ncases; i++) n += j->cases[i].outcome == outcome;
    return n;
}

/* The length of the well-formed UTF-8 sequence at s (1 to 4), 0 when there is none (a stray
 * continuation byte, an overlong form, a surrogate, beyond U+10FFFF, cut short); its code
 * point into *cp. */
static size_t utf8_seq(const unsigned char *s, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) n = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) n = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0; /* also stops at the terminating NUL */
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return n;
}

void tps_xml_escape(tps_buf *out, const char *str, int quote)
{
    const unsigned char *s = (const unsigned char *)(str ? str : "");
    while (*s) {
        uint32_t cp;
        size_t n = utf8_seq(s, &cp);
        if (n == 0) { /* not UTF-8: one replacement character per byte */
            tps_buf_puts(out, "\xef\xbf\xbd");
            s++;
            continue;
        }
        switch (cp) {
        case '&': tps_buf_puts(out, "&amp;"); break;
        case '<': tps_buf_puts(out, "&lt;"); break;
        case '>': tps_buf_puts(out, "&gt;"); break;
        case '"': tps_buf_puts(out, quote ? "&quot;" : "\""); break;
        case '\'': tps_buf_puts(out, quote ? "&apos;" : "'"); break;
        /* In an attribute a parser turns a literal tab or newline into a space: kept as references. */
        case '\t': tps_buf_puts(out, quote ? "&#9;" : "\t"); break;
        case '\n': tps_buf_puts(out, quote ? "&#10;" : "\n"); break;
        case '\r': tps_buf_puts(out, "&#13;"); break;
        default:
            /* XML 1.0's Char excludes the other C0 controls and U+FFFE, U+FFFF. */
            if (cp < 0x20 || cp == 0xfffe || cp == 0xffff) tps_buf_puts(out, "\xef\xbf\xbd");
            else tps_buf_append(out, s, n);
        }
        s += n;
    }
}

static void attr(tps_buf *b, const char *key, const char *value)
{
    tps_buf_printf(b, " %s=\"", key);
    tps_xml_escape(b, value, 1);
    tps_buf_putc(b, '"');
}

/* xs:decimal (no exponent, no NaN): seconds with millisecond digits, never negative. */
static void seconds_attr(tps_buf *b, double s)
{
    if (!(s >= 0) || !isfinite(s)) s = 0;
    if (s > 1e12) s = 1e12;
    tps_buf_printf(b, " time=\"%.3f\"", s);
}

tps_status tps_junit_render(const tps_junit *j, tps_buf *out, tps_error *err)
{
    if (!j || j->oom) return tps_fail_oom(err, "the JUnit report");
    struct tm tm;
    char stamp[32] = "1970-01-01T00:00:00";
    if (gmtime_r(&j->when, &tm)) strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    tps_buf_puts(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite");
    attr(out, "name", j->name);
    tps_buf_printf(out, " tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\"", j->ncases,
                   tps_junit_count(j, TPS_JUNIT_FAILURE), tps_junit_count(j, TPS_JUNIT_ERROR),
                   tps_junit_count(j, TPS_JUNIT_SKIPPED));
    seconds_attr(out, j->seconds);
    attr(out, "timestamp", stamp);
    attr(out, "hostname", j->host);
    tps_buf_puts(out, ">\n  <properties>\n");
    for (size_t i = 0; i < j->nprops; i++) {
        tps_buf_puts(out, "    <property");
        attr(out, "name", j->props[i].name);
        attr(out, "value", j->props[i].value);
        tps_buf_puts(out, "/>\n");
    }
    tps_buf_puts(out, "  </properties>\n");
    for (size_t i = 0; i < j->ncases; i++) {
        const jcase *c = &j->cases[i];
        tps_buf_puts(out, "  <testcase");
        attr(out, "classname", c->classname);
        attr(out, "name", c->name);
        seconds_attr(out, c->seconds);
        if (c->outcome == TPS_JUNIT_PASS) {
            tps_buf_puts(out, "/>\n");
            continue;
        }
        static const char *const elem[] = {"", "failure", "error", "skipped"};
        static const char *const type[] = {"", "mismatch", "invalid", "skipped"};
        tps_buf_printf(out, ">\n    <%s", elem[c->outcome]);
        attr(out, "type", type[c->outcome]);
        if (c->message) attr(out, "message", c->message);
        tps_buf_putc(out, '>');
        tps_xml_escape(out, c->text.data ? c->text.data : "", 0);
        tps_buf_printf(out, "</%s>\n  </testcase>\n", elem[c->outcome]);
    }
    tps_buf_puts(out, "  <system-out></system-out>\n  <system-err></system-err>\n</testsuite>\n");
    if (out->oom) return tps_fail_oom(err, "the JUnit report");
    return TPS_OK;
}
