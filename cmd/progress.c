#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "lib/base.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int terminal_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
    return 80;
}

/* Decimal units, as disk and network speeds are quoted. */
static void human(uint64_t bytes, char *out, size_t size)
{
    static const char *const unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1000 && u < 5) {
        v /= 1000;
        u++;
    }
    if (u == 0) snprintf(out, size, "%llu B", (unsigned long long)bytes);
    else snprintf(out, size, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, unit[u]);
}

void tps_progress_begin(tps_progress_state *s, const char *verb)
{
    s->verb = verb;
    s->start = s->last = now();
    s->enabled = !tps_common.quiet && isatty(STDERR_FILENO);
    s->shown = false;
    /* TPSHARD_PROGRESS_FD=N (the Python API's progress callback): the same updates as JSON
     * lines {"verb","done","total","tensor"} on descriptor N, terminal or not. */
    const char *fd = getenv("TPSHARD_PROGRESS_FD");
    s->fd = fd && *fd && strspn(fd, "0123456789") == strlen(fd) && strlen(fd) < 6 ? atoi(fd) : -1;
    if (s->fd >= 0) s->enabled = true;
}

static void draw_fd(const tps_progress *p, tps_progress_state *s, double t)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    s->last = t;
    tps_jw_init(&w, &b, false);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "verb");
    tps_jw_string(&w, s->verb);
    tps_jw_key(&w, "done");
    tps_jw_u64(&w, p->done);
    tps_jw_key(&w, "total");
    tps_jw_u64(&w, p->total);
    tps_jw_key(&w, "tensor");
    tps_jw_string(&w, p->tensor ? p->tensor : "");
    tps_jw_object_end(&w);
    tps_buf_putc(&b, '\n');
    if (tps_buf_cstr(&b) && write(s->fd, b.data, b.len) < 0) s->fd = -1; /* the reader went away */
    tps_buf_release(&b);
}

static void draw(const tps_progress *p, tps_progress_state *s, double t)
{
    if (s->fd >= 0) {
        draw_fd(p, s, t);
        return;
    }
    s->last = t;
    double el = t - s->start, rate = el > 0 ? (double)p->done / el : 0;
    char done[32], total[32], eta[32], line[512];
    human(p->done, done, sizeof done);
    human(p->total, total, sizeof total);
    if (rate > 0) {
        unsigned long long sec = (unsigned long long)((double)(p->total - p->done) / rate + 0.5);
        if (sec >= 3600) snprintf(eta, sizeof eta, "%llu:%02llu:%02llu", sec / 3600, sec / 60 % 60, sec % 60);
        else snprintf(eta, sizeof eta, "%llu:%02llu", sec / 60, sec % 60);
    } else {
        snprintf(eta, sizeof eta, "--");
    }
    int n = snprintf(line, sizeof line, "%s %s / %s  %3.0f%%  %.2f GB/s  ETA %s  ", s->verb, done, total,
                     p->total ? 100.0 * (double)p->done / (double)p->total : 100.0, rate / 1e9, eta);
    /* The tensor name gets what is left of the line; its tail (layer and role) matters most. */
    int room = terminal_width() - 1 - n;
    const char *name = p->tensor ? p->tensor : "";
    int len = (int)strlen(name);
    if (room < 8) fprintf(stderr, "\r\033[K%.*s", n, line);
    else if (len <= room) fprintf(stderr, "\r\033[K%s%s", line, name);
    else fprintf(stderr, "\r\033[K%s...%s", line, name + len - (room - 3));
    fflush(stderr);
    s->shown = true;
}

void tps_progress_update(const tps_progress *p, void *state)
{
    tps_progress_state *s = state;
    if (!s->enabled) return;
    double t = now();
    if (t - s->last < 0.2 && p->done < p->total) return; /* at most 5 redraws a second, and the last */
    draw(p, s, t);
}

void tps_progress_show(const tps_progress *p, tps_progress_state *s)
{
    if (s->enabled) draw(p, s, now());
}

void tps_progress_file_done(const char *name, uint64_t bytes, void *state)
{
    tps_progress_state *s = state;
    if (!tps_common.verbose || tps_common.quiet) return;
    tps_progress_suspend(s); /* the next redraw puts the progress line back under the listing */
    char size[32];
    human(bytes, size, sizeof size);
    printf("wrote %s (%s)\n", name, size);
    fflush(stdout);
}

void tps_progress_suspend(tps_progress_state *s)
{
    if (s->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    s->shown = false;
}

void tps_progress_end(tps_progress_state *s) { tps_progress_suspend(s); }
