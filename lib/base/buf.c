#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(tps_buf *b, size_t extra)
{
    if (b->oom) return false;
    if (extra > (size_t)-1 - b->len - 1) { b->oom = true; return false; }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > ((size_t)-1) / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) { b->oom = true; return false; }
    b->data = p;
    b->cap = cap;
    return true;
}

void tps_buf_append(tps_buf *b, const void *p, size_t n)
{
    if (!reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void tps_buf_puts(tps_buf *b, const char *s) { tps_buf_append(b, s, strlen(s)); }

void tps_buf_putc(tps_buf *b, char c) { tps_buf_append(b, &c, 1); }

void tps_buf_printf(tps_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

const char *tps_buf_cstr(tps_buf *b)
{
    if (b->oom) return NULL;
    if (!b->data && !reserve(b, 0)) return NULL;
    b->data[b->len] = '\0';
    return b->data;
}

void tps_buf_reset(tps_buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

void tps_buf_release(tps_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}
