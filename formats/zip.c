#include "zip.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../lib/base/checked.h"
#include "../lib/base/index.h"

#define SIG_LOCAL TPS_ZIP_SIG_LOCAL
#define SIG_CENTRAL TPS_ZIP_SIG_CENTRAL
#define SIG_EOCD TPS_ZIP_SIG_EOCD
#define SIG_Z64_EOCD TPS_ZIP_SIG_Z64_EOCD
#define SIG_Z64_LOC TPS_ZIP_SIG_Z64_LOC
#define EOCD_LEN TPS_ZIP_EOCD_LEN
#define Z64_EOCD_LEN TPS_ZIP_Z64_EOCD_LEN
#define Z64_LOC_LEN TPS_ZIP_Z64_LOC_LEN
#define CENTRAL_LEN TPS_ZIP_CENTRAL_LEN
#define LOCAL_LEN TPS_ZIP_LOCAL_LEN
#define EOCD_SEARCH (65535u + EOCD_LEN)
#define INBUF 65536u

/* Refused general-purpose flags: encrypted (0), patched data (5), strong encryption (6),
 * masked local headers (13). */
#define BAD_FLAGS ((1u << 0) | (1u << 5) | (1u << 6) | (1u << 13))

typedef struct cursor {
    const tps_zip_entry *e; /* NULL: no stream open */
    z_stream zs;
    uint64_t in_pos;  /* compressed bytes fed so far */
    uint64_t out_pos; /* uncompressed bytes produced so far */
    uint32_t crc;
    unsigned char in[INBUF];
} cursor;

struct tps_zip {
    int fd;
    const char *path;
    uint64_t base; /* where the archive starts in the file (a torch.save stream inside a DCP .distcp) */
    uint64_t size;
    unsigned flags;
    tps_zip_entry *entries;
    size_t n;
    size_t *sorted; /* entry indices sorted by name, for lookup and the duplicate check */
    size_t crc_absent;
    pthread_mutex_t lock;
    cursor *cur; /* allocated on the first deflated read */
};

static uint16_t le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

static tps_status pread_at(const tps_zip *z, uint64_t off, void *buf, size_t len, const char *what, tps_error *err)
{
    uint64_t end;
    if (!tps_add_u64(off, len, &end) || end > z->size)
        return tps_fail(err, TPS_EINVALID, "%s: truncated zip archive: %s needs bytes [%llu, %llu) but the file has %llu",
                        z->path, what, (unsigned long long)off, (unsigned long long)off + len,
                        (unsigned long long)z->size);
    return tps_pread_full(z->fd, z->path, z->base + off, buf, len, err);
}

/* Finds the end record: the last "PK\5\6" whose comment length ends it exactly at EOF. */
static tps_status find_eocd(const tps_zip *z, uint64_t *eocd_ofs, unsigned char eocd[EOCD_LEN], tps_error *err)
{
    if (z->size < EOCD_LEN)
        return tps_fail(err, TPS_EINVALID, "%s: %llu bytes is too short for a zip archive (no end of central directory record)",
                        z->path, (unsigned long long)z->size);
    uint64_t span = z->size < EOCD_SEARCH ? z->size : EOCD_SEARCH;
    uint64_t start = z->size - span;
    unsigned char *tail = malloc((size_t)span);
    if (!tail) return tps_fail_oom(err, "searching for the zip end record");
    tps_status st = pread_at(z, start, tail, (size_t)span, "the end record search", err);
    if (st) {
        free(tail);
        return st;
    }
    for (size_t i = (size_t)span - EOCD_LEN + 1; i-- > 0;) {
        if (le32(tail + i) != SIG_EOCD) continue;
        if ((uint64_t)i + EOCD_LEN + le16(tail + i + 20) != span) continue; /* a signature inside the comment */
        memcpy(eocd, tail + i, EOCD_LEN);
        *eocd_ofs = start + i;
        free(tail);
        return TPS_OK;
    }
    free(tail);
    return tps_fail(err, TPS_EINVALID, "%s: no end of central directory record in the last %llu bytes (truncated or not a zip archive)",
                    z->path, (unsigned long long)span);
}

/* cd_ofs, cd_size, count and where the central directory must end (the first end record). */
static tps_status read_end_records(tps_zip *z, uint64_t *cd_ofs, uint64_t *cd_size, uint64_t *count, uint64_t *cd_end_limit,
                                   tps_error *err)
{
    unsigned char e[EOCD_LEN] = {0};
    uint64_t eocd_ofs = 0;
    tps_status st = find_eocd(z, &eocd_ofs, e, err);
    if (st) return st;
    uint16_t disk = le16(e + 4), cd_disk = le16(e + 6), n_disk = le16(e + 8), n_total = le16(e + 10);
    uint32_t size32 = le32(e + 12), ofs32 = le32(e + 16);
    if (disk != 0 && disk != 0xFFFF) return tps_fail(err, TPS_EINVALID, "%s: multi-disk zip archives are not supported (disk %u)", z->path, disk);
    if (cd_disk != 0 && cd_disk != 0xFFFF) return tps_fail(err, TPS_EINVALID, "%s: multi-disk zip archives are not supported (central directory on disk %u)", z->path, cd_disk);
    *count = n_total;
    *cd_size = size32;
    *cd_ofs = ofs32;
    *cd_end_limit = eocd_ofs;
    unsigned char loc[Z64_LOC_LEN];
    if (eocd_ofs >= Z64_LOC_LEN) {
        TPS_CHECK(pread_at(z, eocd_ofs - Z64_LOC_LEN, loc, sizeof loc, "the ZIP64 locator", err));
        if (le32(loc) == SIG_Z64_LOC) {
            uint64_t rec_ofs = le64(loc + 8), rec_end;
            if (le32(loc + 4) != 0 || le32(loc + 16) != 1)
                return tps_fail(err, TPS_EINVALID, "%s: ZIP64 locator names disk %u of %u; multi-disk archives are not supported",
                                z->path, le32(loc + 4), le32(loc + 16));
            if (!tps_add_u64(rec_ofs, Z64_EOCD_LEN, &rec_end) || rec_end > eocd_ofs - Z64_LOC_LEN)
                return tps_fail(err, TPS_EINVALID, "%s: ZIP64 locator at offset %llu points to %llu, outside the archive's end area",
                                z->path, (unsigned long long)(eocd_ofs - Z64_LOC_LEN), (unsigned long long)rec_ofs);
            unsigned char r[Z64_EOCD_LEN];
            TPS_CHECK(pread_at(z, rec_ofs, r, sizeof r, "the ZIP64 end record", err));
            if (le32(r) != SIG_Z64_EOCD || le64(r + 4) < Z64_EOCD_LEN - 12)
                return tps_fail(err, TPS_EINVALID, "%s: bad ZIP64 end of central directory record at offset %llu",
                                z->path, (unsigned long long)rec_ofs);
            if (le32(r + 16) != 0 || le32(r + 20) != 0)
                return tps_fail(err, TPS_EINVALID, "%s: ZIP64 end record names disks %u/%u; multi-disk archives are not supported",
                                z->path, le32(r + 16), le32(r + 20));
            uint64_t z_disk = le64(r + 24), z_total = le64(r + 32), z_size = le64(r + 40), z_ofs = le64(r + 48);
            if (z_disk != z_total)
                return tps_fail(err, TPS_EINVALID, "%s: ZIP64 end record: %llu entries on this disk but %llu in total",
                                z->path, (unsigned long long)z_disk, (unsigned long long)z_total);
            /* Unsaturated classic fields must agree: a disagreement means one of them lies. */
            if ((n_total != 0xFFFF && n_total != z_total) || (size32 != 0xFFFFFFFFu && size32 != z_size) ||
                (ofs32 != 0xFFFFFFFFu && ofs32 != z_ofs))
                return tps_fail(err, TPS_EINVALID,
                                "%s: the ZIP64 end record (%llu entries, directory %llu bytes at %llu) contradicts the classic one (%u, %u at %u)",
                                z->path, (unsigned long long)z_total, (unsigned long long)z_size, (unsigned long long)z_ofs,
                                n_total, size32, ofs32);
            *count = z_total;
            *cd_size = z_size;
            *cd_ofs = z_ofs;
            *cd_end_limit = rec_ofs;
            return TPS_OK;
        }
    }
    if (n_disk != n_total)
        return tps_fail(err, TPS_EINVALID, "%s: end record: %u entries on this disk but %u in total", z->path, n_disk, n_total);
    if (n_total == 0xFFFF || size32 == 0xFFFFFFFFu || ofs32 == 0xFFFFFFFFu)
        return tps_fail(err, TPS_EINVALID, "%s: the end record has saturated fields but there is no ZIP64 locator", z->path);
    return TPS_OK;
cleanup:
    return st;
}

static bool unsafe_name(const char *s, size_t n)
{
    if (n == 0 || s[0] == '/' || memchr(s, '\\', n) || memchr(s, '\0', n)) return true;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j] != '/') j++;
        if (j - i == 2 && s[i] == '.' && s[i + 1] == '.') return true;
        i = j + 1;
    }
    return false;
}

/* Takes ZIP64 values for the saturated fields from the extras of one central header. */
static tps_status apply_zip64_extra(const tps_zip *z, const char *name, const unsigned char *ex, size_t exlen,
                                    uint64_t *usize, uint64_t *csize, uint64_t *lofs, uint32_t *disk, tps_error *err)
{
    bool need_u = *usize == 0xFFFFFFFFu, need_c = *csize == 0xFFFFFFFFu, need_o = *lofs == 0xFFFFFFFFu,
         need_d = *disk == 0xFFFF;
    bool found = false;
    for (size_t i = 0; i < exlen;) {
        if (exlen - i < 4)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s': truncated extra field header", z->path, name);
        uint16_t id = le16(ex + i), len = le16(ex + i + 2);
        if ((size_t)len > exlen - i - 4)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s': extra field 0x%04x of %u bytes overruns the extra area",
                            z->path, name, id, len);
        if (id == 0x0001 && !found) {
            found = true;
            const unsigned char *p = ex + i + 4;
            size_t left = len;
            uint64_t *fields[3] = {usize, csize, lofs};
            bool needs[3] = {need_u, need_c, need_o};
            for (int f = 0; f < 3; f++) {
                if (!needs[f]) continue;
                if (left < 8)
                    return tps_fail(err, TPS_EINVALID, "%s: entry '%s': ZIP64 extra field too short for its saturated sizes",
                                    z->path, name);
                *fields[f] = le64(p);
                p += 8;
                left -= 8;
            }
            if (need_d) {
                if (left < 4)
                    return tps_fail(err, TPS_EINVALID, "%s: entry '%s': ZIP64 extra field lacks the disk number", z->path, name);
                *disk = le32(p);
            }
        }
        i += 4 + (size_t)len;
    }
    if ((need_u || need_c || need_o || need_d) && !found)
        return tps_fail(err, TPS_EINVALID, "%s: entry '%s': saturated size or offset fields but no ZIP64 extra field",
                        z->path, name);
    return TPS_OK;
}

static int cmp_name(const void *a, const void *b, void *ctx)
{
    const tps_zip *z = ctx;
    return strcmp(z->entries[*(const size_t *)a].name, z->entries[*(const size_t *)b].name);
}
static int cmp_local(const void *a, const void *b, void *ctx)
{
    const tps_zip *z = ctx;
    uint64_t x = z->entries[*(const size_t *)a].local_ofs, y = z->entries[*(const size_t *)b].local_ofs;
    return x < y ? -1 : x > y;
}

static tps_status parse_central(tps_zip *z, const unsigned char *cd, uint64_t cd_size, uint64_t count, uint64_t cd_ofs,
                                tps_error *err)
{
    size_t pos = 0;
    for (uint64_t k = 0; k < count; k++) {
        if (cd_size - pos < CENTRAL_LEN || le32(cd + pos) != SIG_CENTRAL)
            return tps_fail(err, TPS_EINVALID, "%s: central directory entry %llu at offset %llu: bad signature or truncated",
                            z->path, (unsigned long long)k, (unsigned long long)(cd_ofs + pos));
        const unsigned char *h = cd + pos;
        size_t nlen = le16(h + 28), xlen = le16(h + 30), clen = le16(h + 32);
        if (cd_size - pos - CENTRAL_LEN < nlen + xlen + clen)
            return tps_fail(err, TPS_EINVALID, "%s: central directory entry %llu at offset %llu overruns the directory",
                            z->path, (unsigned long long)k, (unsigned long long)(cd_ofs + pos));
        tps_zip_entry *e = &z->entries[z->n];
        e->name = malloc(nlen + 1);
        if (!e->name) return tps_fail_oom(err, "reading the zip directory");
        memcpy(e->name, h + CENTRAL_LEN, nlen);
        e->name[nlen] = '\0';
        z->n++;
        if (unsafe_name((const char *)h + CENTRAL_LEN, nlen))
            return tps_fail(err, TPS_EINVALID, "%s: entry %llu has an unsafe name '%s' (empty, absolute, '..', backslash or NUL)",
                            z->path, (unsigned long long)k, e->name);
        e->flags = le16(h + 8);
        e->method = le16(h + 10);
        e->crc = le32(h + 16);
        e->csize = le32(h + 20);
        e->usize = le32(h + 24);
        e->local_ofs = le32(h + 42);
        uint32_t disk = le16(h + 34);
        tps_status st = apply_zip64_extra(z, e->name, h + CENTRAL_LEN + nlen, xlen, &e->usize, &e->csize, &e->local_ofs,
                                          &disk, err);
        if (st) return st;
        if (disk != 0) return tps_fail(err, TPS_EINVALID, "%s: entry '%s' starts on disk %u; multi-disk archives are not supported", z->path, e->name, disk);
        if (e->flags & BAD_FLAGS)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s' is encrypted or patched (flags 0x%04x); refused", z->path, e->name, e->flags);
        if (e->method != TPS_ZIP_STORED && e->method != TPS_ZIP_DEFLATE)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s' uses compression method %u; only stored (0) and deflate (8) are supported",
                            z->path, e->name, e->method);
        if (e->method == TPS_ZIP_STORED && e->csize != e->usize)
            return tps_fail(err, TPS_EINVALID, "%s: stored entry '%s' has compressed size %llu != size %llu", z->path, e->name,
                            (unsigned long long)e->csize, (unsigned long long)e->usize);
        if (e->usize > 0 && e->csize == 0)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s' claims %llu bytes from 0 compressed bytes", z->path, e->name,
                            (unsigned long long)e->usize);
        pos += CENTRAL_LEN + nlen + xlen + clen;
    }
    if (pos != cd_size)
        return tps_fail(err, TPS_EINVALID, "%s: central directory is %llu bytes but its %llu entries use %zu", z->path,
                        (unsigned long long)cd_size, (unsigned long long)count, pos);
    return TPS_OK;
}

/* Reads each local header, fixes data_ofs, and checks that entries neither overlap nor run
 * into the central directory. */
static tps_status check_locals(tps_zip *z, uint64_t cd_ofs, tps_error *err)
{
    size_t *order = malloc(z->n ? z->n * sizeof *order : 1);
    char *lname = NULL;
    tps_status st = TPS_OK;
    if (!order) return tps_fail_oom(err, "checking zip entries");
    for (size_t i = 0; i < z->n; i++) order[i] = i;
    qsort_r(order, z->n, sizeof *order, cmp_local, z);
    for (size_t k = 0; k < z->n; k++) {
        tps_zip_entry *e = &z->entries[order[k]];
        unsigned char h[LOCAL_LEN];
        TPS_CHECK(pread_at(z, e->local_ofs, h, sizeof h, "a local header", err));
        if (le32(h) != SIG_LOCAL) {
            st = tps_fail(err, TPS_EINVALID, "%s: entry '%s': no local header signature at offset %llu", z->path, e->name,
                          (unsigned long long)e->local_ofs);
            goto cleanup;
        }
        size_t nlen = le16(h + 26), xlen = le16(h + 28), cnlen = strlen(e->name);
        free(lname);
        lname = malloc(nlen + 1);
        if (!lname) {
            st = tps_fail_oom(err, "checking zip entries");
            goto cleanup;
        }
        TPS_CHECK(pread_at(z, e->local_ofs + LOCAL_LEN, lname, nlen, "a local header's name", err));
        if (nlen != cnlen || memcmp(lname, e->name, nlen) != 0) {
            lname[nlen] = '\0';
            st = tps_fail(err, TPS_EINVALID, "%s: entry '%s': the local header at offset %llu names '%s'", z->path, e->name,
                          (unsigned long long)e->local_ofs, lname);
            goto cleanup;
        }
        if (le16(h + 6) & BAD_FLAGS) {
            st = tps_fail(err, TPS_EINVALID, "%s: entry '%s': local header flags 0x%04x mark it encrypted or patched; refused",
                          z->path, e->name, le16(h + 6));
            goto cleanup;
        }
        uint64_t data_end;
        e->data_ofs = e->local_ofs + LOCAL_LEN + nlen + xlen; /* local_ofs + 30 < size: no overflow */
        uint64_t limit = k + 1 < z->n ? z->entries[order[k + 1]].local_ofs : cd_ofs;
        if (!tps_add_u64(e->data_ofs, e->csize, &data_end) || data_end > limit) {
            st = tps_fail(err, TPS_EINVALID,
                          "%s: entry '%s': data [%llu, +%llu) overlaps the next %s at offset %llu (overlapping entries, possible zip bomb)",
                          z->path, e->name, (unsigned long long)e->data_ofs, (unsigned long long)e->csize,
                          k + 1 < z->n ? "entry" : "central directory", (unsigned long long)limit);
            goto cleanup;
        }
    }
cleanup:
    free(lname);
    free(order);
    return st;
}

tps_status tps_zip_open(int fd, const char *path, uint64_t size, unsigned flags, tps_zip **out, tps_error *err)
{
    return tps_zip_open_window(fd, path, 0, size, flags, out, err);
}

tps_status tps_zip_open_window(int fd, const char *path, uint64_t base, uint64_t size, unsigned flags, tps_zip **out,
                               tps_error *err)
{
    *out = NULL;
    tps_status st = TPS_OK;
    unsigned char *cd = NULL;
    tps_zip *z = calloc(1, sizeof *z);
    if (!z) return tps_fail_oom(err, "opening a zip archive");
    z->fd = fd;
    z->path = path;
    z->base = base;
    z->size = size;
    z->flags = flags;
    pthread_mutex_init(&z->lock, NULL);
    uint64_t cd_ofs = 0, cd_size = 0, count = 0, cd_limit = 0, cd_end;
    TPS_CHECK(read_end_records(z, &cd_ofs, &cd_size, &count, &cd_limit, err));
    if (!tps_add_u64(cd_ofs, cd_size, &cd_end) || cd_end != cd_limit) {
        st = tps_fail(err, TPS_EINVALID,
                      "%s: central directory [%llu, +%llu) does not end where the end records start (%llu): truncated, or data prepended",
                      path, (unsigned long long)cd_ofs, (unsigned long long)cd_size, (unsigned long long)cd_limit);
        goto cleanup;
    }
    if (count > cd_size / CENTRAL_LEN) {
        st = tps_fail(err, TPS_EINVALID, "%s: %llu entries cannot fit in a %llu-byte central directory", path,
                      (unsigned long long)count, (unsigned long long)cd_size);
        goto cleanup;
    }
    /* cd_size <= file size (checked above), so these allocations are bounded by the file. */
    cd = malloc(cd_size ? (size_t)cd_size : 1);
    z->entries = calloc(count ? (size_t)count : 1, sizeof *z->entries);
    z->sorted = malloc(count ? (size_t)count * sizeof *z->sorted : 1);
    if (!cd || !z->entries || !z->sorted) {
        st = tps_fail_oom(err, "reading the zip directory");
        goto cleanup;
    }
    TPS_CHECK(pread_at(z, cd_ofs, cd, (size_t)cd_size, "the central directory", err));
    TPS_CHECK(parse_central(z, cd, cd_size, count, cd_ofs, err));
    for (size_t i = 0; i < z->n; i++) z->sorted[i] = i;
    qsort_r(z->sorted, z->n, sizeof *z->sorted, cmp_name, z);
    for (size_t i = 1; i < z->n; i++)
        if (strcmp(z->entries[z->sorted[i]].name, z->entries[z->sorted[i - 1]].name) == 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: duplicate entry name '%s'", path, z->entries[z->sorted[i]].name);
            goto cleanup;
        }
    TPS_CHECK(check_locals(z, cd_ofs, err));
    *out = z;
    z = NULL;
cleanup:
    free(cd);
    tps_zip_free(z);
    return st;
}

void tps_zip_set_flags(tps_zip *z, unsigned flags) { z->flags = flags; }
size_t tps_zip_count(const tps_zip *z) { return z->n; }
const tps_zip_entry *tps_zip_entry_at(const tps_zip *z, size_t i) { return i < z->n ? &z->entries[i] : NULL; }
size_t tps_zip_crc_absent(const tps_zip *z) { return z->crc_absent; }

const tps_zip_entry *tps_zip_find(const tps_zip *z, const char *name)
{
    size_t lo = 0, hi = z->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(z->entries[z->sorted[mid]].name, name);
        if (c == 0) return &z->entries[z->sorted[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static tps_status crc_result(tps_zip *z, const tps_zip_entry *e, uint32_t crc, tps_error *err)
{
    if (crc == e->crc) return TPS_OK;
    if (e->crc == 0 && (z->flags & TPS_ZIP_CRC_ZERO_IS_ABSENT)) {
        z->crc_absent++;
        return TPS_OK;
    }
    return tps_fail(err, TPS_EINVALID, "%s: entry '%s': CRC-32 mismatch: data has 0x%08x, directory says 0x%08x", z->path,
                    e->name, crc, e->crc);
}

static void cursor_close(cursor *c)
{
    if (c->e) inflateEnd(&c->zs);
    c->e = NULL;
}

static tps_status cursor_start(cursor *c, const tps_zip_entry *e, tps_error *err)
{
    cursor_close(c);
    memset(&c->zs, 0, sizeof c->zs);
    if (inflateInit2(&c->zs, -15) != Z_OK) return tps_fail_oom(err, "starting zlib inflate");
    c->e = e;
    c->in_pos = c->out_pos = 0;
    c->crc = (uint32_t)crc32(0, NULL, 0);
    return TPS_OK;
}

/* Reads the next INBUF bytes (at most) of the compressed data once inflate has used what
 * it had; never past the entry's compressed size. */
static tps_status cursor_refill(tps_zip *z, cursor *c, tps_error *err)
{
    const tps_zip_entry *e = c->e;
    if (c->zs.avail_in != 0 || c->in_pos >= e->csize) return TPS_OK;
    uint64_t n = e->csize - c->in_pos < INBUF ? e->csize - c->in_pos : INBUF;
    tps_status st = pread_at(z, e->data_ofs + c->in_pos, c->in, (size_t)n, "deflated data", err);
    if (st) return st;
    c->in_pos += n;
    c->zs.next_in = c->in;
    c->zs.avail_in = (uInt)n;
    return TPS_OK;
}

/* Produces the next len bytes of the cursor's entry into out (NULL: discard). */
static tps_status cursor_pull(tps_zip *z, cursor *c, unsigned char *out, uint64_t len, tps_error *err)
{
    const tps_zip_entry *e = c->e;
    unsigned char sink[4096];
    while (len > 0) {
        tps_status st = cursor_refill(z, c, err);
        if (st) return st;
        uint64_t want = len;
        unsigned char *dst = out ? out : sink;
        if (!out && want > sizeof sink) want = sizeof sink;
        if (want > (1u << 30)) want = 1u << 30;
        c->zs.next_out = dst;
        c->zs.avail_out = (uInt)want;
        int r = inflate(&c->zs, Z_NO_FLUSH);
        uint64_t got = want - c->zs.avail_out;
        c->crc = (uint32_t)crc32(c->crc, dst, (uInt)got);
        c->out_pos += got;
        if (out) out += got;
        len -= got;
        if (r == Z_STREAM_END && len > 0)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s': deflate stream ends after %llu bytes but %llu are declared",
                            z->path, e->name, (unsigned long long)c->out_pos, (unsigned long long)e->usize);
        if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s': corrupt deflate data near uncompressed offset %llu (%s)", z->path,
                            e->name, (unsigned long long)c->out_pos, c->zs.msg ? c->zs.msg : "zlib error");
        if (got == 0 && c->zs.avail_in == 0 && c->in_pos >= e->csize && r != Z_STREAM_END)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s': deflate data runs out after %llu of %llu bytes", z->path, e->name,
                            (unsigned long long)c->out_pos, (unsigned long long)e->usize);
    }
    if (c->out_pos == e->usize) {
        /* The declared end: the stream must end here, having used exactly csize bytes. */
        unsigned char extra;
        c->zs.next_out = &extra;
        c->zs.avail_out = 1;
        tps_status st = cursor_refill(z, c, err);
        if (st) return st;
        int r = inflate(&c->zs, Z_NO_FLUSH);
        if (c->zs.avail_out == 0)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s' inflates past its declared size of %llu bytes (zip bomb?)", z->path,
                            e->name, (unsigned long long)e->usize);
        if (r != Z_STREAM_END || c->zs.avail_in != 0 || c->in_pos != e->csize)
            return tps_fail(err, TPS_EINVALID, "%s: entry '%s': deflate stream does not end exactly at its declared sizes (%llu -> %llu)",
                            z->path, e->name, (unsigned long long)e->csize, (unsigned long long)e->usize);
        return crc_result(z, e, c->crc, err);
    }
    return TPS_OK;
}

tps_status tps_zip_read(tps_zip *z, const tps_zip_entry *e, uint64_t off, void *buf, size_t len, tps_error *err)
{
    uint64_t end;
    if (!tps_add_u64(off, len, &end) || end > e->usize)
        return tps_fail(err, TPS_EINVALID, "%s: entry '%s': read of [%llu, +%zu) is past its %llu bytes", z->path, e->name,
                        (unsigned long long)off, len, (unsigned long long)e->usize);
    if (e->method == TPS_ZIP_STORED) return pread_at(z, e->data_ofs + off, buf, len, e->name, err);
    tps_status st = TPS_OK;
    pthread_mutex_lock(&z->lock);
    if (!z->cur) {
        z->cur = calloc(1, sizeof *z->cur);
        if (!z->cur) {
            st = tps_fail_oom(err, "inflating a zip entry");
            goto cleanup;
        }
    }
    if (z->cur->e != e || z->cur->out_pos > off) TPS_CHECK(cursor_start(z->cur, e, err));
    TPS_CHECK(cursor_pull(z, z->cur, NULL, off - z->cur->out_pos, err));
    TPS_CHECK(cursor_pull(z, z->cur, buf, len, err));
cleanup:
    if (st && z->cur) cursor_close(z->cur); /* a failed stream is not resumable */
    pthread_mutex_unlock(&z->lock);
    return st;
}

tps_status tps_zip_read_all(tps_zip *z, const tps_zip_entry *e, uint64_t max, char **out, size_t *len, tps_error *err)
{
    *out = NULL;
    if (e->usize > max)
        return tps_fail(err, TPS_EINVALID, "%s: entry '%s' is %llu bytes; at most %llu expected", z->path, e->name,
                        (unsigned long long)e->usize, (unsigned long long)max);
    char *p = malloc((size_t)e->usize + 1);
    if (!p) return tps_fail_oom(err, "reading a zip entry");
    tps_status st = tps_zip_read(z, e, 0, p, (size_t)e->usize, err);
    if (!st && e->method == TPS_ZIP_STORED) {
        pthread_mutex_lock(&z->lock);
        st = crc_result(z, e, (uint32_t)crc32(0, (const Bytef *)p, (uInt)e->usize), err);
        pthread_mutex_unlock(&z->lock);
    }
    if (st) {
        free(p);
        return st;
    }
    p[e->usize] = '\0';
    *out = p;
    *len = (size_t)e->usize;
    return TPS_OK;
}

tps_status tps_zip_verify(tps_zip *z, const tps_zip_entry *e, tps_error *err)
{
    if (e->method != TPS_ZIP_STORED) {
        if (e->usize == 0) {
            unsigned char none;
            pthread_mutex_lock(&z->lock);
            tps_status st = TPS_OK;
            if (!z->cur && !(z->cur = calloc(1, sizeof *z->cur))) st = tps_fail_oom(err, "inflating a zip entry");
            if (!st) st = cursor_start(z->cur, e, err);
            if (!st) st = cursor_pull(z, z->cur, &none, 0, err);
            pthread_mutex_unlock(&z->lock);
            return st;
        }
        /* Reading the last byte streams the whole entry; the cursor checks sizes and CRC. */
        unsigned char last;
        return tps_zip_read(z, e, e->usize - 1, &last, 1, err);
    }
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) return tps_fail_oom(err, "checking a CRC-32");
    uint32_t crc = (uint32_t)crc32(0, NULL, 0);
    tps_status st = TPS_OK;
    for (uint64_t off = 0; off < e->usize;) {
        size_t n = e->usize - off < CHUNK ? (size_t)(e->usize - off) : CHUNK;
        TPS_CHECK(pread_at(z, e->data_ofs + off, buf, n, e->name, err));
        crc = (uint32_t)crc32(crc, buf, (uInt)n);
        off += n;
    }
    pthread_mutex_lock(&z->lock);
    st = crc_result(z, e, crc, err);
    pthread_mutex_unlock(&z->lock);
cleanup:
    free(buf);
    return st;
}

void tps_zip_free(tps_zip *z)
{
    if (!z) return;
    if (z->cur) {
        cursor_close(z->cur);
        free(z->cur);
    }
    for (size_t i = 0; i < z->n; i++) free(z->entries[i].name);
    free(z->entries);
    free(z->sorted);
    pthread_mutex_destroy(&z->lock);
    free(z);
}
