/* The ZIP reader on archives built here byte by byte (an independent writer: the record
 * layouts of PKWARE's APPNOTE.TXT, section 4.3, deflate from zlib). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "formats/zip.h"
#include "lib/base/buf.h"
#include "tps_test.h"

static void put16(tps_buf *b, unsigned v)
{
    unsigned char p[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    tps_buf_append(b, p, 2);
}
static void put32(tps_buf *b, uint32_t v)
{
    put16(b, v & 0xFFFF);
    put16(b, v >> 16);
}
static void put64(tps_buf *b, uint64_t v)
{
    put32(b, (uint32_t)v);
    put32(b, (uint32_t)(v >> 32));
}

typedef struct ent {
    const char *name;
    const unsigned char *data;
    size_t len;
    int method;
    uint32_t crc; /* 0xFFFFFFFF: compute */
    const char *extra_local; /* raw bytes added to the local header's extra, or NULL */
    size_t extra_local_len;
} ent;

static size_t deflate_raw(const unsigned char *in, size_t n, unsigned char **out)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
    size_t cap = deflateBound(&zs, n);
    *out = malloc(cap);
    zs.next_in = (unsigned char *)in;
    zs.avail_in = (uInt)n;
    zs.next_out = *out;
    zs.avail_out = (uInt)cap;
    deflate(&zs, Z_FINISH);
    size_t got = cap - zs.avail_out;
    deflateEnd(&zs);
    return got;
}

/* A classic or ZIP64 archive of the entries, with an end-record comment. */
static void build(tps_buf *b, const ent *e, size_t n, bool zip64, const char *comment)
{
    uint64_t ofs[16], csz[16];
    uint32_t crcs[16];
    for (size_t i = 0; i < n; i++) {
        unsigned char *comp = NULL;
        size_t clen = e[i].len;
        if (e[i].method == 8) clen = deflate_raw(e[i].data, e[i].len, &comp);
        crcs[i] = e[i].crc != 0xFFFFFFFFu ? e[i].crc : (uint32_t)crc32(0, e[i].data, (uInt)e[i].len);
        ofs[i] = b->len;
        csz[i] = clen;
        put32(b, 0x04034b50);
        put16(b, 20);
        put16(b, 0x0808); /* data descriptor: local crc and sizes 0, as torch writes */
        put16(b, (unsigned)e[i].method);
        put32(b, 0);
        put32(b, 0);
        put32(b, 0);
        put32(b, 0);
        put16(b, (unsigned)strlen(e[i].name));
        put16(b, (unsigned)e[i].extra_local_len);
        tps_buf_puts(b, e[i].name);
        if (e[i].extra_local_len) tps_buf_append(b, e[i].extra_local, e[i].extra_local_len);
        tps_buf_append(b, comp ? comp : e[i].data, clen);
        put32(b, 0x08074b50);
        put32(b, crcs[i]);
        put32(b, (uint32_t)clen);
        put32(b, (uint32_t)e[i].len);
        free(comp);
    }
    uint64_t cd = b->len;
    for (size_t i = 0; i < n; i++) {
        put32(b, 0x02014b50);
        put16(b, 45);
        put16(b, 45);
        put16(b, 0x0808);
        put16(b, (unsigned)e[i].method);
        put32(b, 0);
        put32(b, crcs[i]);
        put32(b, zip64 ? 0xFFFFFFFFu : (uint32_t)csz[i]);
        put32(b, zip64 ? 0xFFFFFFFFu : (uint32_t)e[i].len);
        put16(b, (unsigned)strlen(e[i].name));
        put16(b, zip64 ? 28 : 0);
        put16(b, 0);
        put16(b, 0);
        put16(b, 0);
        put32(b, 0);
        put32(b, zip64 ? 0xFFFFFFFFu : (uint32_t)ofs[i]);
        tps_buf_puts(b, e[i].name);
        if (zip64) {
            put16(b, 1);
            put16(b, 24);
            put64(b, e[i].len);
            put64(b, csz[i]);
            put64(b, ofs[i]);
        }
    }
    uint64_t cd_size = b->len - cd;
    if (zip64) {
        uint64_t rec = b->len;
        put32(b, 0x06064b50);
        put64(b, 44);
        put16(b, 45);
        put16(b, 45);
        put32(b, 0);
        put32(b, 0);
        put64(b, n);
        put64(b, n);
        put64(b, cd_size);
        put64(b, cd);
        put32(b, 0x07064b50);
        put32(b, 0);
        put64(b, rec);
        put32(b, 1);
    }
    put32(b, 0x06054b50);
    put16(b, 0);
    put16(b, 0);
    put16(b, zip64 ? 0xFFFF : (unsigned)n);
    put16(b, zip64 ? 0xFFFF : (unsigned)n);
    put32(b, zip64 ? 0xFFFFFFFFu : (uint32_t)cd_size);
    put32(b, zip64 ? 0xFFFFFFFFu : (uint32_t)cd);
    put16(b, (unsigned)strlen(comment));
    tps_buf_puts(b, comment);
}

typedef struct opened {
    char path[64];
    int fd;
    tps_zip *z;
    tps_error err;
    tps_status st;
} opened;

static void open_bytes(opened *o, const tps_buf *b, unsigned flags)
{
    strcpy(o->path, "/tmp/tps-zip-XXXXXX");
    o->fd = mkstemp(o->path);
    if (write(o->fd, b->data, b->len) != (ssize_t)b->len) o->fd = -1;
    tps_error_clear(&o->err);
    o->z = NULL;
    o->st = tps_zip_open(o->fd, o->path, b->len, flags, &o->z, &o->err);
}

static void close_opened(opened *o)
{
    tps_zip_free(o->z);
    close(o->fd);
    unlink(o->path);
}

static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n);
    uint32_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)((x >> 16) % 7 == 0 ? x >> 8 : i / 64); /* compressible, not trivial */
    }
    return p;
}

TEST(stored_and_deflated_entries_read_back)
{
    size_t n1 = 1000, n2 = 300000;
    unsigned char *a = pattern(n1, 1), *b2 = pattern(n2, 2);
    static const char fb[] = "FB\x06\x00ZZZZZZ"; /* torch's local-only alignment padding */
    ent e[] = {{"arch/data/0", a, n1, 0, 0xFFFFFFFFu, fb, 10}, {"arch/big.npy", b2, n2, 8, 0xFFFFFFFFu, NULL, 0}};
    tps_buf b = TPS_BUF_INIT;
    build(&b, e, 2, false, "PK\5\6 a fake end record inside the comment");
    opened o;
    open_bytes(&o, &b, 0);
    CHECK_EQ_U64(o.st, TPS_OK);
    if (!o.st) {
        CHECK_EQ_U64(tps_zip_count(o.z), 2);
        const tps_zip_entry *s = tps_zip_find(o.z, "arch/data/0"), *d = tps_zip_find(o.z, "arch/big.npy");
        CHECK(s && d && !tps_zip_find(o.z, "arch/data"));
        /* The stored data starts after the LOCAL extra, which the central header lacks. */
        CHECK_EQ_U64(s->data_ofs, 30 + strlen("arch/data/0") + 10);
        unsigned char *got = malloc(n2);
        CHECK_EQ_U64(tps_zip_read(o.z, s, 0, got, n1, &o.err), TPS_OK);
        CHECK(memcmp(got, a, n1) == 0);
        /* Deflate: forward, then backward (restart), then the tail (end checks + CRC). */
        size_t offs[] = {70000, 5, 123456, 299990, 0};
        for (size_t k = 0; k < 5; k++) {
            size_t len = n2 - offs[k] < 10 ? n2 - offs[k] : 10;
            memset(got, 0, len);
            CHECK_EQ_U64(tps_zip_read(o.z, d, offs[k], got, len, &o.err), TPS_OK);
            CHECK(memcmp(got, b2 + offs[k], len) == 0);
        }
        CHECK_EQ_U64(tps_zip_verify(o.z, s, &o.err), TPS_OK);
        CHECK_EQ_U64(tps_zip_verify(o.z, d, &o.err), TPS_OK);
        CHECK(tps_zip_read(o.z, d, n2 - 5, got, 6, &o.err) == TPS_EINVALID); /* past the end */
        free(got);
    }
    close_opened(&o);
    tps_buf_release(&b);
    free(a);
    free(b2);
}

TEST(zip64_end_records_and_extras)
{
    unsigned char *a = pattern(5000, 3);
    ent e[] = {{"r/x", a, 5000, 0, 0xFFFFFFFFu, NULL, 0}, {"r/y", a, 4000, 8, 0xFFFFFFFFu, NULL, 0}};
    tps_buf b = TPS_BUF_INIT;
    build(&b, e, 2, true, "");
    opened o;
    open_bytes(&o, &b, 0);
    CHECK_EQ_U64(o.st, TPS_OK);
    if (!o.st) {
        const tps_zip_entry *y = tps_zip_find(o.z, "r/y");
        CHECK(y != NULL);
        if (y) {
            CHECK_EQ_U64(y->usize, 4000);
            CHECK_EQ_U64(y->method, 8);
            CHECK_EQ_U64(tps_zip_verify(o.z, y, &o.err), TPS_OK);
        }
    }
    close_opened(&o);
    tps_buf_release(&b);
    free(a);
}

TEST(crc_mismatch_and_zero_crc_policy)
{
    unsigned char *a = pattern(100, 4);
    uint32_t good = (uint32_t)crc32(0, a, 100);
    ent wrong[] = {{"r/x", a, 100, 0, good ^ 0x80u, NULL, 0}};
    ent zero[] = {{"r/x", a, 100, 0, 0, NULL, 0}};
    ent zero_deflated[] = {{"r/x", a, 100, 8, 0, NULL, 0}};
    tps_buf b = TPS_BUF_INIT;
    opened o;
    build(&b, wrong, 1, false, "");
    for (unsigned flags = 0; flags < 2; flags++) {
        open_bytes(&o, &b, flags);
        CHECK_EQ_U64(o.st, TPS_OK);
        if (!o.st) {
            CHECK_EQ_U64(tps_zip_verify(o.z, tps_zip_entry_at(o.z, 0), &o.err), TPS_EINVALID);
            CHECK_CONTAINS(o.err.msg, "CRC-32 mismatch");
        }
        close_opened(&o);
    }
    const ent *zs[] = {zero, zero_deflated};
    for (int k = 0; k < 2; k++) {
        tps_buf_reset(&b);
        build(&b, zs[k], 1, false, "");
        open_bytes(&o, &b, 0);
        if (!o.st) CHECK_EQ_U64(tps_zip_verify(o.z, tps_zip_entry_at(o.z, 0), &o.err), TPS_EINVALID);
        close_opened(&o);
        open_bytes(&o, &b, TPS_ZIP_CRC_ZERO_IS_ABSENT);
        CHECK_EQ_U64(o.st, TPS_OK);
        if (!o.st) {
            CHECK_EQ_U64(tps_zip_verify(o.z, tps_zip_entry_at(o.z, 0), &o.err), TPS_OK);
            CHECK_EQ_U64(tps_zip_crc_absent(o.z), 1);
        }
        close_opened(&o);
    }
    tps_buf_release(&b);
    free(a);
}

TEST(every_truncation_and_unsafe_names_refused)
{
    unsigned char *a = pattern(700, 5);
    ent e[] = {{"r/a", a, 300, 0, 0xFFFFFFFFu, NULL, 0}, {"r/b", a, 700, 8, 0xFFFFFFFFu, NULL, 0}};
    tps_buf b = TPS_BUF_INIT;
    build(&b, e, 2, true, "c");
    size_t refused = 0;
    for (size_t len = 0; len < b.len; len++) {
        tps_buf t = TPS_BUF_INIT;
        tps_buf_append(&t, b.data, len);
        opened o;
        open_bytes(&o, &t, 0);
        /* A prefix that still opens would have to be a different valid archive; none is. */
        if (o.st == TPS_EINVALID) refused++;
        close_opened(&o);
        tps_buf_release(&t);
    }
    CHECK_EQ_U64(refused, b.len);
    const char *unsafe[] = {"/abs", "r/../x", "..", "r\\x", "r/.."};
    for (size_t k = 0; k < sizeof unsafe / sizeof unsafe[0]; k++) {
        ent u[] = {{unsafe[k], a, 10, 0, 0xFFFFFFFFu, NULL, 0}};
        tps_buf_reset(&b);
        build(&b, u, 1, false, "");
        opened o;
        open_bytes(&o, &b, 0);
        CHECK_EQ_U64(o.st, TPS_EINVALID);
        CHECK_CONTAINS(o.err.msg, "unsafe name");
        close_opened(&o);
    }
    ent ok_dots[] = {{"r/..x/.y", a, 10, 0, 0xFFFFFFFFu, NULL, 0}};
    tps_buf_reset(&b);
    build(&b, ok_dots, 1, false, "");
    opened o;
    open_bytes(&o, &b, 0);
    CHECK_EQ_U64(o.st, TPS_OK);
    close_opened(&o);
    tps_buf_release(&b);
    free(a);
}

int main(void)
{
    RUN(stored_and_deflated_entries_read_back);
    RUN(zip64_end_records_and_extras);
    RUN(crc_mismatch_and_zero_crc_policy);
    RUN(every_truncation_and_unsafe_names_refused);
    return tps_test_done();
}
