/* tps_crc32 against zlib's crc32_z (an independent implementation): every length 0..300 at
 * every alignment 0..15, long buffers, and chained calls split at arbitrary points. */
#include <stdlib.h>
#include <zlib.h>

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

int main(void)
{
    RUN(crc_matches_zlib_every_length_and_alignment);
    RUN(crc_matches_zlib_long_and_chained);
    return tps_test_done();
}
