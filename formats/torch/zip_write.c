#include "zip_write.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../../lib/base/checked.h"
#include "../../lib/base/crc.h"
#include "../outfile.h"
#include "../zip.h"

#define FLAGS 0x0808u /* bit 3: sizes in the data descriptor; bit 11: UTF-8 names */
#define U32_SAT 0xFFFFFFFFu
#define U16_SAT 0xFFFFu
#define Z64_VERSION 45u /* APPNOTE 4.4.3.2: 4.5, ZIP64 */

typedef struct zentry {
    char *name;
    uint64_t ofs, size;
    uint32_t crc;
    bool z64;
} zentry;

struct tps_zipw {
    tps_outfile *out;
    bool borrowed;   /* out is the caller's (tps_zipw_open_in): never committed nor aborted here */
    uint64_t base;   /* where the archive begins in out: its offsets count from there */
    bool force;
    zentry *e;
    size_t n, cap;
    bool open;       /* entry n-1 is being streamed */
    uint64_t left;   /* its bytes still to come */
    uint32_t crc;    /* its CRC so far */
};

typedef struct bytes {
    unsigned char b[128];
    size_t n;
} bytes;

static void p16(bytes *o, uint32_t v)
{
    o->b[o->n++] = (unsigned char)v;
    o->b[o->n++] = (unsigned char)(v >> 8);
}

static void p32(bytes *o, uint32_t v)
{
    p16(o, v & 0xffff);
    p16(o, v >> 16);
}

static void p64(bytes *o, uint64_t v)
{
    p32(o, (uint32_t)v);
    p32(o, (uint32_t)(v >> 32));
}

static tps_status emit(tps_zipw *z, const void *p, size_t n, tps_error *err)
{
    return tps_outfile_put(z->out, p, n, false, 0, err);
}

tps_status tps_zipw_open(const char *path, const char *label, bool force_zip64, tps_zipw **out, tps_error *err)
{
    *out = NULL;
    tps_zipw *z = calloc(1, sizeof *z);
    if (!z) return tps_fail_oom(err, "opening a zip writer");
    z->force = force_zip64;
    tps_status st = tps_outfile_open(path, label, &z->out, err);
    if (st) {
        free(z);
        return st;
    }
    *out = z;
    return TPS_OK;
}

tps_status tps_zipw_open_in(tps_outfile *out, tps_zipw **zo, tps_error *err)
{
    *zo = NULL;
    tps_zipw *z = calloc(1, sizeof *z);
    if (!z) return tps_fail_oom(err, "opening a zip writer");
    z->out = out;
    z->borrowed = true;
    z->base = tps_outfile_size(out);
    *zo = z;
    return TPS_OK;
}

/* Bytes of the archive so far: its offsets, which count from its first byte. */
static uint64_t here(const tps_zipw *z) { return tps_outfile_size(z->out) - z->base; }

uint64_t tps_zipw_left(const tps_zipw *z) { return z->open ? z->left : 0; }

tps_status tps_zipw_begin(tps_zipw *z, const char *name, uint64_t size, tps_error *err)
{
    const char *file = tps_outfile_name(z->out);
    size_t nlen = strlen(name);
    if (z->open) return tps_fail(err, TPS_EINVALID, "%s: zip entry '%s' begun before '%s' ended", file, name, z->e[z->n - 1].name);
    if (nlen == 0 || nlen > 0xFFFF) return tps_fail(err, TPS_EINVALID, "%s: zip entry name of %zu bytes", file, nlen);
    if (z->n == z->cap) {
        size_t nc = z->cap ? z->cap * 2 : 16;
        zentry *ne = realloc(z->e, nc * sizeof *ne);
        if (!ne) return tps_fail_oom(err, "listing zip entries");
        z->e = ne;
        z->cap = nc;
    }
    zentry *e = &z->e[z->n];
    memset(e, 0, sizeof *e);
    if (!(e->name = strdup(name))) return tps_fail_oom(err, "listing zip entries");
    z->n++;
    e->ofs = here(z);
    e->size = size;
    e->z64 = z->force || size >= U32_SAT || e->ofs >= U32_SAT;
    /* torch's getPadding: the data starts where the local header, name and extras end */
    uint64_t start = e->ofs + TPS_ZIP_LOCAL_LEN + nlen + (e->z64 ? 20 : 0) + 4;
    unsigned pad = (unsigned)((TPS_ZIPW_ALIGN - start % TPS_ZIPW_ALIGN) % TPS_ZIPW_ALIGN);
    bytes h = {.n = 0};
    p32(&h, TPS_ZIP_SIG_LOCAL);
    p16(&h, e->z64 ? Z64_VERSION : 0);
    p16(&h, FLAGS);
    p16(&h, TPS_ZIP_STORED);
    p32(&h, 0); /* time, date */
    p32(&h, 0); /* CRC: in the data descriptor */
    p32(&h, e->z64 ? U32_SAT : 0);
    p32(&h, e->z64 ? U32_SAT : 0);
    p16(&h, (uint32_t)nlen);
    p16(&h, (e->z64 ? 20 : 0) + 4 + pad);
    tps_status st = emit(z, h.b, h.n, err);
    if (!st) st = emit(z, name, nlen, err);
    h.n = 0;
    if (e->z64) {
        p16(&h, TPS_ZIP_EXTRA_ZIP64);
        p16(&h, 16);
        p64(&h, size);
        p64(&h, size);
    }
    p16(&h, 'F' | 'B' << 8);
    p16(&h, pad);
    memset(h.b + h.n, 'Z', pad);
    h.n += pad;
    if (!st) st = emit(z, h.b, h.n, err);
    z->open = true;
    z->left = size;
    z->crc = 0;
    return st;
}

tps_status tps_zipw_data(tps_zipw *z, const void *p, size_t n, bool have_crc, uint32_t crc, tps_error *err)
{
    if (!z->open || n > z->left)
        return tps_fail(err, TPS_EINVALID, "%s: %zu bytes offered where %llu remain of the current zip entry",
                        tps_outfile_name(z->out), n, (unsigned long long)tps_zipw_left(z));
    if (!have_crc) crc = tps_crc32(0, p, n);
    z->crc = (uint32_t)crc32_combine(z->crc, crc, (z_off_t)n);
    z->left -= n;
    return tps_outfile_put(z->out, p, n, true, crc, err);
}

tps_status tps_zipw_end(tps_zipw *z, tps_error *err)
{
    if (!z->open || z->left)
        return tps_fail(err, TPS_EINVALID, "%s: zip entry ended with %llu of its bytes missing", tps_outfile_name(z->out),
                        (unsigned long long)tps_zipw_left(z));
    zentry *e = &z->e[z->n - 1];
    e->crc = z->crc;
    z->open = false;
    bytes d = {.n = 0};
    p32(&d, TPS_ZIP_SIG_DESCRIPTOR);
    p32(&d, e->crc);
    if (e->z64) {
        p64(&d, e->size);
        p64(&d, e->size);
    } else {
        p32(&d, (uint32_t)e->size);
        p32(&d, (uint32_t)e->size);
    }
    return emit(z, d.b, d.n, err);
}

tps_status tps_zipw_record(tps_zipw *z, const char *name, const void *p, size_t n, tps_error *err)
{
    tps_status st = tps_zipw_begin(z, name, n, err);
    if (!st && n) st = tps_zipw_data(z, p, n, false, 0, err);
    if (!st) st = tps_zipw_end(z, err);
    return st;
}

static tps_status central(tps_zipw *z, const zentry *e, tps_error *err)
{
    bool big = z->force || e->size >= U32_SAT, far = z->force || e->ofs >= U32_SAT;
    size_t nlen = strlen(e->name);
    unsigned xlen = (big || far) ? 4u + (big ? 16u : 0u) + (far ? 8u : 0u) : 0u;
    bytes h = {.n = 0};
    p32(&h, TPS_ZIP_SIG_CENTRAL);
    p16(&h, 0); /* made by: as torch's miniz writes it */
    p16(&h, e->z64 ? Z64_VERSION : 0);
    p16(&h, FLAGS);
    p16(&h, TPS_ZIP_STORED);
    p32(&h, 0);
    p32(&h, e->crc);
    p32(&h, big ? U32_SAT : (uint32_t)e->size);
    p32(&h, big ? U32_SAT : (uint32_t)e->size);
    p16(&h, (uint32_t)nlen);
    p16(&h, xlen);
    p16(&h, 0); /* comment */
    p16(&h, 0); /* disk */
    p16(&h, 0); /* internal attributes */
    p32(&h, 0); /* external attributes */
    p32(&h, far ? U32_SAT : (uint32_t)e->ofs);
    tps_status st = emit(z, h.b, h.n, err);
    if (!st) st = emit(z, e->name, nlen, err);
    if (st || !xlen) return st;
    h.n = 0;
    p16(&h, TPS_ZIP_EXTRA_ZIP64);
    p16(&h, xlen - 4);
    if (big) {
        p64(&h, e->size);
        p64(&h, e->size);
    }
    if (far) p64(&h, e->ofs);
    return emit(z, h.b, h.n, err);
}

tps_status tps_zipw_commit(tps_zipw *z, uint32_t *crc, uint64_t *size, tps_error *err)
{
    tps_status st = TPS_OK;
    if (z->open) {
        st = tps_fail(err, TPS_EINVALID, "%s: not committed: zip entry '%s' has %llu bytes still to come",
                      tps_outfile_name(z->out), z->e[z->n - 1].name, (unsigned long long)z->left);
        goto cleanup;
    }
    uint64_t cd_ofs = here(z);
    for (size_t i = 0; i < z->n; i++) TPS_CHECK(central(z, &z->e[i], err));
    uint64_t cd_end = here(z), cd_size = cd_end - cd_ofs;
    bytes r = {.n = 0};
    p32(&r, TPS_ZIP_SIG_Z64_EOCD);
    p64(&r, TPS_ZIP_Z64_EOCD_LEN - 12);
    p16(&r, 0x031e); /* made by: as miniz writes it */
    p16(&r, Z64_VERSION);
    p32(&r, 0);
    p32(&r, 0);
    p64(&r, z->n);
    p64(&r, z->n);
    p64(&r, cd_size);
    p64(&r, cd_ofs);
    p32(&r, TPS_ZIP_SIG_Z64_LOC);
    p32(&r, 0);
    p64(&r, cd_end);
    p32(&r, 1);
    bool sat = z->force;
    p32(&r, TPS_ZIP_SIG_EOCD);
    p16(&r, 0);
    p16(&r, 0);
    p16(&r, sat || z->n >= U16_SAT ? U16_SAT : (uint32_t)z->n);
    p16(&r, sat || z->n >= U16_SAT ? U16_SAT : (uint32_t)z->n);
    p32(&r, sat || cd_size >= U32_SAT ? U32_SAT : (uint32_t)cd_size);
    p32(&r, sat || cd_ofs >= U32_SAT ? U32_SAT : (uint32_t)cd_ofs);
    p16(&r, 0);
    TPS_CHECK(emit(z, r.b, r.n, err));
    if (z->borrowed) goto cleanup;
    TPS_CHECK(tps_outfile_commit(z->out, err));
    if (crc) *crc = tps_outfile_crc(z->out);
    if (size) *size = tps_outfile_size(z->out);
cleanup:
    tps_zipw_abort(z);
    return st;
}

void tps_zipw_abort(tps_zipw *z)
{
    if (!z) return;
    if (!z->borrowed) tps_outfile_abort(z->out);
    for (size_t i = 0; i < z->n; i++) free(z->e[i].name);
    free(z->e);
    free(z);
}

/* Streams the head of p[0, n) the current entry still takes (*took bytes) and ends the entry
 * when that completes it (*ended).  With have_crc, *crc is the CRC-32 of all n bytes on
 * entry, and of the n - *took left on return. */
static tps_status tps_zipw_feed(tps_zipw *z, const void *p, size_t n, bool have_crc, uint32_t *crc, size_t *took, bool *ended,
                         tps_error *err)
{
    uint64_t left = tps_zipw_left(z);
    size_t take = n < left ? n : (size_t)left;
    uint32_t c = have_crc ? *crc : 0;
    if (have_crc && take < n) {
        /* The caller's CRC spans this entry and what follows: the head's is computed, the
         * rest's follows from crc(AB) = crc32_combine(crc(A), 0, |B|) ^ crc(B). */
        c = tps_crc32(0, p, take);
        *crc ^= (uint32_t)crc32_combine(c, 0, (z_off_t)(n - take));
    }
    *took = take;
    *ended = false;
    tps_status st = tps_zipw_data(z, p, take, have_crc, c, err);
    if (st || take < left) return st;
    *ended = true;
    return tps_zipw_end(z, err);
}

tps_status tps_zipw_run_write(tps_zipw_run *r, const void *buf, size_t len, bool have_crc, uint32_t crc, tps_error *err)
{
    const unsigned char *p = buf;
    if (r->failed) return tps_fail(err, TPS_EIO, "%s: an earlier write failed", r->label);
    while (len > 0) {
        if (r->cur >= r->n) {
            r->failed = true;
            return tps_fail(err, TPS_EINVALID, "%s: %zu bytes more than the tensors hold", r->label, len);
        }
        size_t took;
        bool ended;
        tps_status st = tps_zipw_feed(r->z, p, len, have_crc, &crc, &took, &ended, err);
        if (!st && ended) st = r->next(r, err);
        if (st) {
            r->failed = true;
            return st;
        }
        p += took;
        len -= took;
    }
    return TPS_OK;
}
