/* A growable byte buffer.  Appends after an allocation failure are ignored and set oom,
 * so a caller can build a whole text and check once at the end. */
#ifndef TPS_BUF_H
#define TPS_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tps_buf {
    char *data; /* always NUL-terminated when len > 0 or after tps_buf_cstr */
    size_t len;
    size_t cap;
    bool oom;
} tps_buf;

#define TPS_BUF_INIT {NULL, 0, 0, false}

void tps_buf_append(tps_buf *b, const void *p, size_t n);
void tps_buf_puts(tps_buf *b, const char *s);
void tps_buf_putc(tps_buf *b, char c);
void tps_buf_printf(tps_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The contents as a C string ("" when empty); NULL after an allocation failure. */
const char *tps_buf_cstr(tps_buf *b);
void tps_buf_reset(tps_buf *b);   /* len = 0, keeps the memory */
void tps_buf_release(tps_buf *b); /* frees; b is empty and reusable afterwards */

#endif
