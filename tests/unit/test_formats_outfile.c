/* The output file's buffering (formats/outfile.c): whatever the mix of small pieces (copied
 * into the buffer) and large ones (written from the caller's memory), the file holds exactly
 * the bytes put, in order, and the running CRC equals zlib's over the file.  Large pieces
 * are put from many places within a page relative to the file offset, in both CRC modes;
 * a piece from a mapped file cut short under it fails cleanly. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "formats/outfile.h"
#include "lib/base/iocache.h"
#include "tps_test.h"

enum { PAGE = 4096, LARGE = (256 << 10) + 777, SOURCE = 2 << 20 };

static char dir[256];

static unsigned char *read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    unsigned char *b = malloc((size_t)sb.st_size + 1);
    ssize_t got = b ? read(fd, b, (size_t)sb.st_size) : -1;
    close(fd);
    if (got != sb.st_size) {
        free(b);
        return NULL;
    }
    *len = (size_t)got;
    return b;
}

/* Puts a script of pieces taken from src (each at the source offset the script names) and
 * compares the file with the same bytes concatenated here. */
typedef struct piece {
    size_t from, n;
} piece;

static void put_and_compare(const char *name, const unsigned char *src, const piece *ps, size_t np, bool with_crc)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tps_error err;
    tps_error_clear(&err);
    tps_outfile *f = NULL;
    CHECK(tps_outfile_open(path, NULL, &f, &err) == TPS_OK);
    if (!f) return;
    size_t total = 0;
    for (size_t i = 0; i < np; i++) total += ps[i].n;
    unsigned char *want = malloc(total ? total : 1);
    size_t at = 0;
    bool ok = want != NULL;
    for (size_t i = 0; ok && i < np; i++) {
        const unsigned char *p = src + ps[i].from;
        uint32_t c = (uint32_t)crc32(0, p, (uInt)ps[i].n);
        ok = tps_outfile_put(f, p, ps[i].n, with_crc, c, &err) == TPS_OK;
        memcpy(want + at, p, ps[i].n);
        at += ps[i].n;
    }
    CHECK(ok);
    CHECK_STR(err.msg, "");
    CHECK_EQ_U64(tps_outfile_size(f), total);
    CHECK(tps_outfile_commit(f, &err) == TPS_OK);
    uint32_t running = tps_outfile_crc(f);
    tps_outfile_abort(f);
    size_t len = 0;
    unsigned char *got = read_all(path, &len);
    CHECK(got != NULL && len == total);
    CHECK(got && want && len == total && memcmp(got, want, total) == 0);
    CHECK_EQ_U64(running, want ? (uint32_t)crc32(0, want, (uInt)total) : 0);
    free(got);
    free(want);
    unlink(path);
}

/* A large piece after a small one that leaves the file offset at `lead` within a page, from
 * a source address `shift` bytes before that place (so (offset - address) mod PAGE is
 * shift): 0 (page onto page), a few bytes (where the kernel's copy aliases: docs/design.md, "Where
 * a file's data start"), and far.  The last piece is longer than the buffer. */
TEST(outfile_large_pieces_from_every_place_in_a_page)
{
    unsigned char *src = aligned_alloc(PAGE, SOURCE);
    CHECK(src != NULL);
    if (!src) return;
    for (size_t i = 0; i < SOURCE; i++) src[i] = (unsigned char)(i * 2654435761u >> 13);
    const size_t leads[] = {0, 8, 4095};
    const size_t shifts[] = {0, 1, 8, 255, 256, 2048, 4088};
    for (size_t a = 0; a < sizeof leads / sizeof leads[0]; a++)
        for (size_t b = 0; b < sizeof shifts / sizeof shifts[0]; b++)
            for (int with_crc = 0; with_crc < 2; with_crc++) {
                size_t lead = leads[a], from = (PAGE + lead - shifts[b]) % PAGE + PAGE;
                /* a second large piece follows the first at once, then a small one and a
                 * piece longer than the buffer, so direct writes and buffer flushes alternate */
                piece ps[] = {{0, lead}, {from, LARGE}, {from + LARGE, LARGE}, {3, 5},
                              {from + 1, (1 << 20) + 4099}};
                put_and_compare("large.bin", src, ps, sizeof ps / sizeof ps[0], with_crc);
            }
    free(src);
}

/* Many small pieces (the buffered path) of sizes that cross the buffer's end at every kind
 * of place, between a few large ones. */
TEST(outfile_small_pieces_cross_buffer_ends)
{
    unsigned char *src = malloc(SOURCE);
    CHECK(src != NULL);
    if (!src) return;
    uint64_t rng = 12345;
    for (size_t i = 0; i < SOURCE; i++) src[i] = (unsigned char)(tps_test_uniform(&rng) * 256);
    enum { NP = 3000 };
    piece *ps = malloc(NP * sizeof *ps);
    CHECK(ps != NULL);
    if (!ps) {
        free(src);
        return;
    }
    for (size_t i = 0; i < NP; i++) {
        size_t n = i % 500 == 499 ? LARGE : 1 + (size_t)(tps_test_uniform(&rng) * 9000);
        ps[i] = (piece){(size_t)(tps_test_uniform(&rng) * (double)(SOURCE - n)), n};
    }
    put_and_compare("small.bin", src, ps, NP, false);
    put_and_compare("small-crc.bin", src, ps, NP, true);
    free(ps);
    free(src);
}

/* A piece from a mapped source cut short under it must fail with EIO naming the file, not
 * kill the process: whether the outfile reads it for the CRC (the SIGBUS caught) or, with
 * the CRC given, only hands it to write() (which meets the missing page: EFAULT); the same
 * piece from the intact file goes through. */
TEST(outfile_piece_from_a_shrunk_mapping_fails_cleanly)
{
    char src[512], out[512];
    snprintf(src, sizeof src, "%s/src.bin", dir);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    int fd = open(src, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    if (fd < 0) return;
    unsigned char *b = malloc(SOURCE);
    CHECK(b != NULL);
    for (size_t i = 0; b && i < SOURCE; i++) b[i] = (unsigned char)(i * 7 + 1);
    CHECK(b && write(fd, b, SOURCE) == (ssize_t)SOURCE);
    tps_io_map m;
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_io_map_file(fd, src, &m, &err) == TPS_OK && m.base);
    uint32_t crc = (uint32_t)crc32(0, b, LARGE);
    for (int run = 0; m.base && run < 3; run++) {
        int shrink = run > 0, with_crc = run == 2; /* the engine hands mapped chunks with their CRC */
        tps_outfile *f = NULL;
        tps_error_clear(&err);
        CHECK(tps_outfile_open(out, NULL, &f, &err) == TPS_OK);
        if (!f) break;
        CHECK(tps_outfile_put(f, b, 8, false, 0, &err) == TPS_OK);
        if (shrink) CHECK(ftruncate(fd, PAGE) == 0);
        tps_status st = tps_outfile_put(f, m.base, LARGE, with_crc, crc, &err);
        if (shrink) {
            CHECK(st == TPS_EIO);
            CHECK_CONTAINS(err.msg, "out.bin");
            CHECK(tps_outfile_failed(f));
        } else {
            CHECK(st == TPS_OK);
            CHECK(tps_outfile_commit(f, &err) == TPS_OK);
        }
        tps_outfile_abort(f);
    }
    size_t len = 0;
    unsigned char *got = read_all(out, &len); /* the intact run's file; the failed one never replaced it */
    CHECK(got && b && len == 8 + (size_t)LARGE && memcmp(got, b, 8) == 0 && memcmp(got + 8, b, LARGE) == 0);
    free(got);
    tps_io_unmap(&m);
    close(fd);
    unlink(src);
    unlink(out);
    free(b);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tps-outfile-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    RUN(outfile_large_pieces_from_every_place_in_a_page);
    RUN(outfile_small_pieces_cross_buffer_ends);
    RUN(outfile_piece_from_a_shrunk_mapping_fails_cleanly);
    rmdir(dir);
    return tps_test_done();
}
