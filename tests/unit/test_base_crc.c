/* tps_crc32 against zlib's crc32_z (an independent implementation): every length 0..300 at
 * every alignment 0..15, long buffers, and chained calls split at arbitrary points; then each
 * implementation (zlib, PCLMULQDQ, VPCLMULQDQ) on its own on random buffers, those this CPU
 * lacks skipped loudly; and a mapped file that shrinks under the checksum, and outside it. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "lib/base/iocache.h"

#include "lib/base/crc.h"
#include "tps_test.h"

static unsigned char *random_bytes(size_t n, uint64_t seed)
{
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (unsigned char)(seed >> 56);
    }
    return p;
}

TEST(crc_matches_zlib_every_length_and_alignment)
{
    unsigned char *b = random_bytes(400, 1);
    int bad = 0;
    for (size_t a = 0; a < 16; a++)
        for (size_t n = 0; n <= 300; n++)
            if (tps_crc32(0, b + a, n) != (uint32_t)crc32_z(0, b + a, n) && bad++ < 5)
                CHECK_EQ_U64(tps_crc32(0, b + a, n), crc32_z(0, b + a, n));
    CHECK(bad == 0);
    free(b);
}

TEST(crc_matches_zlib_long_and_chained)
{
    size_t n = (5u << 20) + 77;
    unsigned char *b = random_bytes(n, 7);
    uint32_t want = (uint32_t)crc32_z(0, b, n);
    CHECK_EQ_U64(tps_crc32(0, b, n), want);
    uint32_t c = 0;
    size_t at = 0, step = 1;
    while (at < n) { /* pieces of 1, 2, 4 ... bytes, then the rest */
        size_t k = step < n - at ? step : n - at;
        c = tps_crc32(c, b + at, k);
        at += k;
        step = step * 2 + 3;
    }
    CHECK_EQ_U64(c, want);
    memset(b, 0, 4096);
    CHECK_EQ_U64(tps_crc32(0, b, 4096), crc32_z(0, b, 4096));
    free(b);
}

/* Random lengths around the fold widths (64, 256) and long ones, at random alignments and
 * random starting CRCs, for one implementation. */
static void each_impl_matches_zlib(tps_crc_impl impl, const char *name)
{
    size_t cap = (3u << 20) + 64;
    unsigned char *b = random_bytes(cap, 11 + (uint64_t)impl);
    uint32_t got;
    if (!tps_crc32_impl(impl, 0, b, 1, &got)) {
        printf("skip - %s: this CPU lacks it\n", name);
        free(b);
        return;
    }
    uint64_t seed = 99;
    int bad = 0;
    for (int i = 0; i < 3000; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t a = (size_t)(seed >> 60);
        size_t n = i < 1000 ? (size_t)(seed >> 20) % 1100 : i < 2900 ? (size_t)(seed >> 20) % 70000 : (size_t)(seed >> 20) % (cap - 16);
        uint32_t c0 = (uint32_t)(seed >> 8);
        CHECK(tps_crc32_impl(impl, c0, b + a, n, &got));
        if (got != (uint32_t)crc32_z(c0, b + a, n) && bad++ < 5) {
            printf("  %s: length %zu at alignment %zu\n", name, n, a);
            CHECK_EQ_U64(got, crc32_z(c0, b + a, n));
        }
    }
    CHECK(bad == 0);
    free(b);
}

TEST(crc_each_implementation_matches_zlib)
{
    each_impl_matches_zlib(TPS_CRC_ZLIB, "zlib");
    each_impl_matches_zlib(TPS_CRC_PCLMUL, "PCLMULQDQ");
    each_impl_matches_zlib(TPS_CRC_VPCLMUL, "VPCLMULQDQ (AVX-512)");
}

/* The copy engine checksums a source through a mapping: a file cut short under it must give
 * false (the SIGBUS caught), not kill the process, and the intact part the zlib CRC. */
TEST(crc_of_a_mapped_file_that_shrinks)
{
    char path[] = "/tmp/tps_crc_map_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    size_t n = 1u << 20;
    unsigned char *b = random_bytes(n, 5);
    CHECK(write(fd, b, n) == (ssize_t)n);
    tps_io_map m;
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_io_map_file(fd, path, &m, &err) == TPS_OK);
    CHECK_EQ_U64(m.size, n);
    uint32_t c = 0;
    CHECK(tps_io_mapped_crc(m.base, n, &c));
    CHECK_EQ_U64(c, crc32_z(0, b, n));
    CHECK(ftruncate(fd, 4096) == 0);
    c = 7;
    CHECK(!tps_io_mapped_crc(m.base, n, &c));
    CHECK_EQ_U64(c, 7);
    CHECK(tps_io_mapped_crc(m.base, 4096, &c)); /* still usable after a caught fault */
    CHECK_EQ_U64(c, crc32_z(7, b, 4096));
    tps_io_unmap(&m);
    close(fd);
    unlink(path);
    free(b);
}

/* verify reads tensors in place through mappings, where no jump is armed: a file cut short
 * under one ends the process with the registered message and exit code (here 4), not a crash
 * (SIGBUS).  In a child, which the test waits for. */
TEST(a_shrunk_mapping_outside_the_crc_exits_with_the_registered_code)
{
    char path[] = "/tmp/tps_crc_map_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    size_t n = 1u << 20;
    unsigned char *b = random_bytes(n, 6);
    CHECK(write(fd, b, n) == (ssize_t)n);
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], STDERR_FILENO);
        tps_io_exit_on_shrunk_mapping("shrunk under a mapping\n", 4);
        tps_io_map m;
        tps_error err;
        tps_error_clear(&err);
        if (tps_io_map_file(fd, path, &m, &err) != TPS_OK || ftruncate(fd, 4096) != 0) _exit(99);
        volatile unsigned char sum = 0;
        for (size_t i = 0; i < n; i += 4096) sum += m.base[i];
        _exit(98); /* the page past the new end was read: no fault */
    }
    close(pipefd[1]);
    char msg[64] = {0};
    ssize_t got = read(pipefd[0], msg, sizeof msg - 1);
    close(pipefd[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ_U64(WIFEXITED(status) ? WEXITSTATUS(status) : 0, 4);
    CHECK(got > 0 && strcmp(msg, "shrunk under a mapping\n") == 0);
    close(fd);
    unlink(path);
    free(b);
}

int main(void)
{
    RUN(crc_matches_zlib_every_length_and_alignment);
    RUN(crc_matches_zlib_long_and_chained);
    RUN(crc_each_implementation_matches_zlib);
    /* first: ThreadSanitizer keeps a thread that left a signal handler by siglongjmp (the next
     * test) "in the handler", and a child forked after that died of the next SIGBUS */
    RUN(a_shrunk_mapping_outside_the_crc_exits_with_the_registered_code);
    RUN(crc_of_a_mapped_file_that_shrinks);
    return tps_test_done();
}
