/* The non-finite scan of verify (verify/load/finite.h) against the C library's isfinite() on the
 * same bits decoded another way: BF16 widened to float32 by a shift, F16 and FP8 E5M2 (the
 * top byte of an F16) through the compiler's _Float16, F32 and F64 as they are; FP8 E4M3's
 * only non-finite codes are 0x7f and 0xff (OCP 8-bit floating point spec, "E4M3": no
 * infinities, NaN S.1111.111).  Every pattern of the 8- and 16-bit formats, random ones of
 * the wider, fed whole and in ragged pieces (the gather walk splits elements). */
#include <math.h>
#include <stdlib.h>

#include "../../verify/load/finite.h"
#include "tps_test.h"

static int finite_by_libm(tps_dtype dt, const unsigned char *e)
{
    uint16_t h;
    uint32_t w;
    float f;
    double d;
    _Float16 hf;
    switch (dt) {
    case TPS_DT_BF16:
        memcpy(&h, e, 2);
        w = (uint32_t)h << 16;
        memcpy(&f, &w, 4);
        return isfinite(f);
    case TPS_DT_F16:
        memcpy(&hf, e, 2);
        return isfinite((float)hf);
    case TPS_DT_F8_E5M2:
        h = (uint16_t)(e[0] << 8);
        memcpy(&hf, &h, 2);
        return isfinite((float)hf);
    case TPS_DT_F8_E4M3: return (e[0] & 0x7f) != 0x7f;
    case TPS_DT_F32: memcpy(&f, e, 4); return isfinite(f);
    case TPS_DT_F64: memcpy(&d, e, 8); return isfinite(d);
    default: return 1;
    }
}

/* n elements of size es in buf: the scan fed whole, and fed in pieces of 1-7 bytes, both
 * agree with libm on the count and the first index. */
static void check_buffer(tps_dtype dt, size_t es, const unsigned char *buf, size_t n)
{
    uint64_t count = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!finite_by_libm(dt, buf + i * es)) {
            if (!count) first = i;
            count++;
        }
    tps_vfinite whole, pieces;
    tps_vfinite_init(&whole, dt);
    tps_vfinite_feed(&whole, buf, n * es);
    tps_vfinite_init(&pieces, dt);
    srand(7);
    for (size_t off = 0; off < n * es;) {
        size_t k = 1 + (size_t)(rand() % 7);
        if (k > n * es - off) k = n * es - off;
        tps_vfinite_feed(&pieces, buf + off, k);
        off += k;
    }
    CHECK_EQ_U64(whole.count, count);
    CHECK_EQ_U64(pieces.count, count);
    if (count) {
        CHECK_EQ_U64(whole.first, first);
        CHECK_EQ_U64(pieces.first, first);
    }
    CHECK(count > 0); /* every buffer here holds some: the comparison above is not vacuous */
}

TEST(every_8_and_16_bit_pattern)
{
    static unsigned char b8[256], b16[65536 * 2];
    for (int i = 0; i < 256; i++) b8[i] = (unsigned char)(255 - i); /* the first non-finite not at 0 */
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t v = (uint16_t)(i * 40503u + 12345u); /* every pattern once, shuffled (40503 is odd) */
        memcpy(b16 + 2 * i, &v, 2);
    }
    check_buffer(TPS_DT_F8_E4M3, 1, b8, 256);
    check_buffer(TPS_DT_F8_E5M2, 1, b8, 256);
    check_buffer(TPS_DT_BF16, 2, b16, 65536);
    check_buffer(TPS_DT_F16, 2, b16, 65536);
}

TEST(random_wide_patterns)
{
    enum { N = 4096 };
    static unsigned char b[N * 8];
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof b; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (unsigned char)(s >> 56);
    }
    /* random bits are rarely non-finite in F64 (1 in 2048): plant an Inf and a NaN */
    double inf = INFINITY, nan = NAN;
    memcpy(b + 8 * 1000, &inf, 8);
    memcpy(b + 8 * 3000, &nan, 8);
    check_buffer(TPS_DT_F32, 4, b, N * 2);
    check_buffer(TPS_DT_F64, 8, b, N);
}

TEST(integers_are_never_counted)
{
    unsigned char b[16];
    memset(b, 0xff, sizeof b);
    tps_vfinite f;
    tps_vfinite_init(&f, TPS_DT_I32);
    tps_vfinite_feed(&f, b, sizeof b);
    CHECK_EQ_U64(f.count, 0);
}

TEST(message_names_the_index_in_the_shape)
{
    tps_vfinite f;
    tps_vfinite_init(&f, TPS_DT_F32);
    f.count = 3;
    f.first = 1797;
    uint64_t shape[2] = {64, 176};
    char msg[256];
    tps_vfinite_describe(&f, "w", shape, 2, msg, sizeof msg);
    CHECK_STR(msg, "tensor 'w' holds 3 non-finite values (NaN or Inf), the first at [10, 37] (element 1797)");
}

/* The scan's fast path (whole 64-bit words, each lane of them) on finite buffers: one
 * non-finite element planted at each position, of either sign, is counted once, at its
 * place; finite neighbours with every other exponent bit set are not (the largest finite). */
TEST(one_planted_in_a_finite_buffer)
{
    static const struct {
        tps_dtype dt;
        size_t es;
        uint32_t fin, bad[2];
    } k[] = {{TPS_DT_BF16, 2, 0x7f7f, {0x7f80, 0xffc1}},
             {TPS_DT_F16, 2, 0x7bff, {0x7c00, 0xfe01}},
             {TPS_DT_F32, 4, 0x7f7fffffu, {0x7f800000u, 0xffc00001u}}};
    enum { N = 37 }; /* not a whole number of words: the tail too */
    unsigned char b[N * 4];
    for (size_t c = 0; c < sizeof k / sizeof k[0]; c++)
        for (size_t p = 0; p < N; p++)
            for (int v = 0; v < 2; v++) {
                for (size_t i = 0; i < N; i++) memcpy(b + i * k[c].es, i == p ? &k[c].bad[v] : &k[c].fin, k[c].es);
                tps_vfinite f;
                tps_vfinite_init(&f, k[c].dt);
                tps_vfinite_feed(&f, b, N * k[c].es);
                CHECK_EQ_U64(f.count, 1);
                CHECK_EQ_U64(f.first, p);
                tps_vfinite_init(&f, k[c].dt);
                tps_vfinite_feed(&f, b, p * k[c].es); /* the elements before it: none */
                CHECK_EQ_U64(f.count, 0);
            }
}

int main(void)
{
    RUN(every_8_and_16_bit_pattern);
    RUN(random_wide_patterns);
    RUN(one_planted_in_a_finite_buffer);
    RUN(integers_are_never_counted);
    RUN(message_names_the_index_in_the_shape);
    return tps_test_done();
}
