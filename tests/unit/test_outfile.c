/* The output file's buffering (formats/outfile.c): whatever the mix of small pieces (copied
 * into the buffer) and large ones (written from the caller's memory, or through the buffer
 * when the kernel's copy would alias), the file holds exactly the bytes put, in order, and
 * the running CRC equals zlib's over the file.  Large pieces are put from every place within
 * a page relative to the file offset (among them the aliasing band the outfile stages), in
 * both CRC modes. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "formats/outfile.h"
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
 * shift): 0 (page onto page), inside the band the outfile stages (1 to 255), and outside.
 * The last piece is longer than the buffer, so a staged piece takes several runs. */
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
                 * piece several buffers long, so staged runs and buffer flushes alternate */
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

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tps-outfile-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    RUN(outfile_large_pieces_from_every_place_in_a_page);
    RUN(outfile_small_pieces_cross_buffer_ends);
    rmdir(dir);
    return tps_test_done();
}
