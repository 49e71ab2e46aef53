/* The library core: checked arithmetic at its edges, dtypes (names, sizes, decoding checked
 * against independent decoders, rounding checked by brute force against neighbours), the
 * growable buffer, and the tensor index (duplicates, lookups at scale, ranges vs file). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/base/buf.h"
#include "lib/base/checked.h"
#include "lib/base/dtype.h"
#include "lib/base/index.h"
#include "lib/base/strpool.h"
#include "tps_test.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/* ---------------------------------------------------------------------------------- */
/* lib/base/checked.h */

TEST(checked_add_sub_edges)
{
    uint64_t r = 42;
    CHECK(tps_add_u64(UINT64_MAX, 0, &r) && r == UINT64_MAX);
    CHECK(tps_add_u64(UINT64_MAX - 1, 1, &r) && r == UINT64_MAX);
    r = 42;
    CHECK(!tps_add_u64(UINT64_MAX, 1, &r));
    CHECK(!tps_add_u64(1, UINT64_MAX, &r));
    CHECK(!tps_add_u64(UINT64_MAX / 2 + 1, UINT64_MAX / 2 + 1, &r));
    CHECK_EQ_U64(r, 42); /* untouched on overflow */
    CHECK(tps_sub_u64(5, 5, &r) && r == 0);
    CHECK(tps_sub_u64(UINT64_MAX, UINT64_MAX - 1, &r) && r == 1);
    r = 42;
    CHECK(!tps_sub_u64(0, 1, &r));
    CHECK(!tps_sub_u64(UINT64_MAX - 1, UINT64_MAX, &r));
    CHECK_EQ_U64(r, 42);
}

TEST(checked_mul_edges)
{
    uint64_t r = 42;
    const uint64_t two32 = 1ull << 32;
    CHECK(tps_mul_u64(two32 - 1, two32 + 1, &r) && r == UINT64_MAX); /* (2^32-1)(2^32+1) = 2^64-1 */
    CHECK(tps_mul_u64(UINT64_MAX, 1, &r) && r == UINT64_MAX);
    CHECK(tps_mul_u64(0, UINT64_MAX, &r) && r == 0);
    CHECK(tps_mul_u64(UINT64_MAX / 3, 3, &r) && r == UINT64_MAX); /* 2^64-1 = 3 * 0x5555... */
    r = 42;
    CHECK(!tps_mul_u64(two32, two32, &r));              /* exactly 2^64 */
    CHECK(!tps_mul_u64(UINT64_MAX / 3 + 1, 3, &r));     /* 2^64 + 2 */
    CHECK(!tps_mul_u64(1ull << 63, 2, &r));             /* 2^64 */
    CHECK(!tps_mul_u64(UINT64_MAX, UINT64_MAX, &r));
    CHECK_EQ_U64(r, 42);
}

TEST(checked_prod_edges)
{
    uint64_t r = 42;
    CHECK(tps_prod_u64(NULL, 0, &r) && r == 1); /* rank 0: one element */
    const uint64_t zero_first[] = {0, UINT64_MAX, UINT64_MAX};
    CHECK(tps_prod_u64(zero_first, 3, &r) && r == 0);
    const uint64_t zero_mid[] = {4096, 0, 11008};
    CHECK(tps_prod_u64(zero_mid, 3, &r) && r == 0);
    const uint64_t fits[] = {3, 5, 17, 257, 641, 65537, 6700417}; /* the prime factors of 2^64-1 */
    CHECK(tps_prod_u64(fits, 7, &r) && r == UINT64_MAX);
    const uint64_t over_by_one[] = {1ull << 32, 1ull << 31, 2}; /* 2^64 */
    r = 42;
    CHECK(!tps_prod_u64(over_by_one, 3, &r));
    const uint64_t over[] = {3, 5, 17, 257, 641, 65537, 6700417, 2};
    CHECK(!tps_prod_u64(over, 8, &r));
    CHECK_EQ_U64(r, 42);
    const uint64_t typical[] = {128256, 4096};
    CHECK(tps_prod_u64(typical, 2, &r) && r == 525336576ull);
    size_t z = 0;
    CHECK(tps_u64_to_size(0, &z) && z == 0);
    if (sizeof(size_t) == 8) CHECK(tps_u64_to_size(UINT64_MAX, &z) && z == SIZE_MAX);
}

/* ---------------------------------------------------------------------------------- */
/* lib/base/dtype.h */

/* The Dtype enum of safetensors/src/tensor.rs, in its order. */
static const struct {
    const char *name;
    unsigned bits;
} dtype_ref[] = {
    {"BOOL", 8},         {"F4", 4},           {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},   {"I8", 8},
    {"F8_E5M2", 8},      {"F8_E4M3", 8},      {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},         {"F8_E5M2FNUZ", 8},
    {"I16", 16},         {"U16", 16},         {"F16", 16},    {"BF16", 16},   {"I32", 32}, {"U32", 32},
    {"F32", 32},         {"C64", 64},         {"F64", 64},    {"I64", 64},    {"U64", 64},
};

TEST(dtype_names_and_bits)
{
    CHECK_EQ_U64(sizeof dtype_ref / sizeof dtype_ref[0], TPS_DT_COUNT);
    for (int i = 0; i < TPS_DT_COUNT; i++) {
        const char *n = dtype_ref[i].name;
        CHECK_STR(tps_dtype_name((tps_dtype)i), n);
        tps_dtype dt = TPS_DT_COUNT;
        CHECK(tps_dtype_parse(n, strlen(n), &dt));
        CHECK_EQ_U64(dt, i);
        CHECK_EQ_U64(tps_dtype_bits((tps_dtype)i), dtype_ref[i].bits);
        /* lower case, a missing last letter and an extra byte are all refused */
        char lower[32], longer[32];
        size_t len = strlen(n);
        for (size_t k = 0; k <= len; k++) lower[k] = (char)(n[k] >= 'A' && n[k] <= 'Z' ? n[k] + 32 : n[k]);
        CHECK(!tps_dtype_parse(lower, len, &dt));
        CHECK(!tps_dtype_parse(n, len - 1, &dt));
        snprintf(longer, sizeof longer, "%s ", n);
        CHECK(!tps_dtype_parse(longer, len + 1, &dt));
    }
    tps_dtype dt;
    CHECK(!tps_dtype_parse("Bf16", 4, &dt));
    CHECK(!tps_dtype_parse("f32", 3, &dt));
    CHECK(!tps_dtype_parse("F8_E4M3fn", 9, &dt));
    CHECK(!tps_dtype_parse("", 0, &dt));
    CHECK(!tps_dtype_parse("F16\0", 4, &dt));
    CHECK(tps_dtype_parse("F16xyz", 3, &dt) && dt == TPS_DT_F16); /* len bounds the name */
    CHECK_STR(tps_dtype_name(TPS_DT_COUNT), "?");
    CHECK_STR(tps_dtype_name((tps_dtype)-1), "?");
    CHECK_EQ_U64(tps_dtype_bits(TPS_DT_COUNT), 0);
}

TEST(dtype_nbytes)
{
    tps_error err;
    uint64_t n = 99;
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_F4, 3, &n, "w.f4", &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "w.f4: 3 elements of F4");
    CHECK_EQ_U64(n, 99);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_F4, 4, &n, "w", &err), TPS_OK);
    CHECK_EQ_U64(n, 2);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_F6_E2M3, 5, &n, "w.f6", &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "w.f6: 5 elements of F6_E2M3 (6 bits each)");
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_F6_E3M2, 4, &n, "w", &err), TPS_OK);
    CHECK_EQ_U64(n, 3); /* 24 bits */
    /* every F6 count: bytes exactly when 6n is a multiple of 8, i.e. n % 4 == 0 */
    for (uint64_t k = 0; k < 64; k++) {
        tps_error_clear(&err);
        tps_status st = tps_dtype_nbytes(TPS_DT_F6_E2M3, k, &n, "w", &err);
        CHECK_EQ_U64(st, k % 4 == 0 ? TPS_OK : TPS_EINVALID);
        if (st == TPS_OK) CHECK_EQ_U64(n, k / 4 * 3);
    }
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_F32, 0, &n, "w", &err), TPS_OK);
    CHECK_EQ_U64(n, 0);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_U64, (1ull << 58) - 1, &n, "w", &err), TPS_OK);
    CHECK_EQ_U64(n, ((1ull << 58) - 1) * 8);
    /* bit counts past 2^64 - 1 */
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_U64, 1ull << 58, &n, "big", &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "big: 288230376151711744 elements of U64 overflow");
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_F4, UINT64_MAX / 4 + 1, &n, "big", &err), TPS_EINVALID);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_U8, UINT64_MAX / 8 + 1, &n, "big", &err), TPS_EINVALID);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_dtype_nbytes(TPS_DT_U8, UINT64_MAX / 8, &n, "big", &err), TPS_OK);
    CHECK_EQ_U64(n, UINT64_MAX / 8);
}

/* IEEE half to float by moving bit fields (subnormals normalised by shifting), not by
 * scaling with powers of two as the library does. */
static float half_ref(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 0x3ff, bits;
    if (e == 0 && m == 0) {
        bits = sign;
    } else if (e == 0) {
        uint32_t e32 = 127 - 15 + 1;
        while (!(m & 0x400)) {
            m <<= 1;
            e32--;
        }
        bits = sign | e32 << 23 | (m & 0x3ff) << 13;
    } else if (e == 31) {
        bits = sign | 0xffu << 23 | m << 13;
    } else {
        bits = sign | (e + 112) << 23 | m << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* OCP E4M3 (fn): bias 7, no infinities, S.1111.111 NaN. */
static double e4m3_ref(uint8_t b)
{
    uint32_t s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double v;
    if (e == 0) {
        v = (double)m / 512.0; /* m/8 * 2^-6 */
    } else {
        uint32_t bits = (e - 7 + 127) << 23 | m << 20;
        float f;
        memcpy(&f, &bits, 4);
        v = f;
    }
    return s ? -v : v;
}

static bool same_double(double a, double b)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

TEST(dtype_to_f64_exhaustive)
{
    for (uint32_t h = 0; h < 65536; h++) {
        unsigned char le[2] = {(unsigned char)h, (unsigned char)(h >> 8)};
        double got;
        CHECK(tps_dtype_to_f64(TPS_DT_F16, le, 0, &got));
        if (!same_double(got, half_ref((uint16_t)h))) {
            printf("#   F16 0x%04x: %.17g, want %.17g\n", h, got, (double)half_ref((uint16_t)h));
            tps_test_failed_now = 1;
            break;
        }
        uint32_t u = h << 16;
        float f;
        memcpy(&f, &u, 4);
        CHECK(tps_dtype_to_f64(TPS_DT_BF16, le, 0, &got));
        if (!same_double(got, f)) {
            printf("#   BF16 0x%04x: %.17g, want %.17g\n", h, got, (double)f);
            tps_test_failed_now = 1;
            break;
        }
    }
    for (uint32_t b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        double got;
        CHECK(tps_dtype_to_f64(TPS_DT_F8_E4M3, &byte, 0, &got));
        if (!same_double(got, e4m3_ref(byte))) {
            printf("#   E4M3 0x%02x: %.17g, want %.17g\n", b, got, e4m3_ref(byte));
            tps_test_failed_now = 1;
        }
        /* E5M2 is the upper byte of an IEEE half */
        CHECK(tps_dtype_to_f64(TPS_DT_F8_E5M2, &byte, 0, &got));
        if (!same_double(got, half_ref((uint16_t)(b << 8)))) {
            printf("#   E5M2 0x%02x: %.17g, want %.17g\n", b, got, (double)half_ref((uint16_t)(b << 8)));
            tps_test_failed_now = 1;
        }
    }
    /* landmarks from the OCP FP8 spec */
    unsigned char e4[] = {0x7e, 0x01, 0x08, 0xfe, 0x7f};
    double v;
    CHECK(tps_dtype_to_f64(TPS_DT_F8_E4M3, e4, 0, &v) && v == 448.0);
    CHECK(tps_dtype_to_f64(TPS_DT_F8_E4M3, e4, 1, &v) && v == ldexp(1, -9));
    CHECK(tps_dtype_to_f64(TPS_DT_F8_E4M3, e4, 2, &v) && v == ldexp(1, -6));
    CHECK(tps_dtype_to_f64(TPS_DT_F8_E4M3, e4, 3, &v) && v == -448.0);
    CHECK(tps_dtype_to_f64(TPS_DT_F8_E4M3, e4, 4, &v) && isnan(v));
    unsigned char e5[] = {0x7b, 0x7c, 0x01};
    CHECK(tps_dtype_to_f64(TPS_DT_F8_E5M2, e5, 0, &v) && v == 57344.0);
    CHECK(tps_dtype_to_f64(TPS_DT_F8_E5M2, e5, 1, &v) && isinf(v));
    CHECK(tps_dtype_to_f64(TPS_DT_F8_E5M2, e5, 2, &v) && v == ldexp(1, -16));
}

TEST(dtype_to_f64_wide_and_integer)
{
    for (int i = 0; i < 100000; i++) {
        uint32_t u = (uint32_t)rng();
        unsigned char le[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                               (unsigned char)(u >> 24)};
        float f;
        memcpy(&f, &u, 4);
        double got;
        CHECK(tps_dtype_to_f64(TPS_DT_F32, le, 0, &got));
        if (!same_double(got, f)) {
            tps_test_failed_now = 1;
            break;
        }
    }
    /* element index scales by the element size; little-endian bytes */
    unsigned char buf[16] = {0};
    buf[8] = 0x00; buf[9] = 0x00; buf[10] = 0x00; buf[11] = 0x00;
    buf[12] = 0x00; buf[13] = 0x00; buf[14] = 0xf0; buf[15] = 0xbf; /* -1.0 */
    double v;
    CHECK(tps_dtype_to_f64(TPS_DT_F64, buf, 1, &v) && v == -1.0);
    unsigned char ints[8] = {0x80, 0xff, 0xff, 0x7f, 0x01, 0x00, 0x00, 0x80};
    CHECK(tps_dtype_to_f64(TPS_DT_I8, ints, 0, &v) && v == -128.0);
    CHECK(tps_dtype_to_f64(TPS_DT_U8, ints, 0, &v) && v == 128.0);
    CHECK(tps_dtype_to_f64(TPS_DT_I16, ints, 1, &v) && v == 32767.0);  /* ff 7f */
    CHECK(tps_dtype_to_f64(TPS_DT_U16, ints, 0, &v) && v == 65408.0);  /* 80 ff */
    CHECK(tps_dtype_to_f64(TPS_DT_I32, ints, 1, &v) && v == -2147483647.0); /* 01 00 00 80 */
    CHECK(tps_dtype_to_f64(TPS_DT_U32, ints, 1, &v) && v == 2147483649.0);
    CHECK(tps_dtype_to_f64(TPS_DT_I64, ints, 0, &v) && v == (double)(int64_t)0x800000017fffff80ull);
    CHECK(tps_dtype_to_f64(TPS_DT_BOOL, ints, 4, &v) && v == 1.0);
    /* sub-byte and other types have no f64 view */
    CHECK(!tps_dtype_to_f64(TPS_DT_F4, ints, 0, &v));
    CHECK(!tps_dtype_to_f64(TPS_DT_F6_E2M3, ints, 0, &v));
    CHECK(!tps_dtype_to_f64(TPS_DT_F8_E8M0, ints, 0, &v));
    CHECK(!tps_dtype_to_f64(TPS_DT_C64, ints, 0, &v));
    CHECK(!tps_dtype_from_f64(TPS_DT_F8_E4M3, ints, 0, 1.0));
    CHECK(!tps_dtype_from_f64(TPS_DT_I32, ints, 0, 1.0));
}

/* Value of the non-negative pattern m, where the infinity pattern stands for the next power
 * of two past the largest finite value: that is where round-to-nearest overflows. */
static double mag_value(tps_dtype dt, uint16_t m, uint16_t inf_bits, double beyond)
{
    if (m == inf_bits) return beyond;
    unsigned char le[2] = {(unsigned char)m, (unsigned char)(m >> 8)};
    double v = NAN;
    tps_dtype_to_f64(dt, le, 0, &v);
    return v;
}

/* The pattern chosen for v is the nearest representable value, ties to an even pattern:
 * |v| lies between the midpoints to its two neighbours. */
static bool nearest_ok(tps_dtype dt, double v, uint16_t inf_bits, double beyond)
{
    unsigned char le[2];
    CHECK(tps_dtype_from_f64(dt, le, 0, v));
    uint16_t p = (uint16_t)(le[0] | le[1] << 8), m = p & 0x7fff;
    if (isnan(v)) return isnan(mag_value(dt, m, 0xffff, 0));
    bool ok = (p >> 15) == (signbit(v) ? 1 : 0) && m <= inf_bits;
    if (ok) {
        double a = fabs(v), x = mag_value(dt, m, inf_bits, beyond);
        double lo = m > 0 ? (mag_value(dt, (uint16_t)(m - 1), inf_bits, beyond) + x) / 2 : 0;
        double hi = m < inf_bits ? (x + mag_value(dt, (uint16_t)(m + 1), inf_bits, beyond)) / 2 : INFINITY;
        ok = lo <= a && a <= hi;
        if ((a == lo && m > 0) || a == hi) ok = ok && (m & 1) == 0;
    }
    if (!ok) printf("#   %s: %.17g (%a) stored as 0x%04x\n", tps_dtype_name(dt), v, v, p);
    return ok;
}

static void rounding_brute_force(tps_dtype dt, uint16_t inf_bits, double beyond, int min_exp, int max_exp)
{
    static const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, DBL_MAX, -DBL_MAX,
                                      DBL_TRUE_MIN, DBL_MIN, 1.0, -1.0, 65504.0, 65519.99, 65520.0,
                                      65536.0, 3.3895313892515355e38, 3.39e38, 0x1.p-25, 0x1.8p-24,
                                      0x1.0000000000001p-25, 0x1.p-134, 0x1.8p-133, 0x1.p-133};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        if (!nearest_ok(dt, specials[i], inf_bits, beyond)) {
            tps_test_failed_now = 1;
            return;
        }
    for (int i = 0; i < 300000; i++) {
        double v;
        uint64_t r = rng();
        switch (i % 3) {
        case 0: { /* random significand at an exponent in and around the type's range */
            int e = min_exp + (int)(rng() % (uint64_t)(max_exp - min_exp + 1));
            v = ldexp(1.0 + (double)(r >> 12) / 4503599627370496.0, e);
            break;
        }
        case 1: { /* exact midpoints between neighbours and the doubles next to them */
            uint16_t m = (uint16_t)(r % inf_bits);
            double mid = (mag_value(dt, m, inf_bits, beyond) + mag_value(dt, (uint16_t)(m + 1), inf_bits, beyond)) / 2;
            int k = (int)(rng() % 3);
            v = k == 0 ? mid : k == 1 ? nextafter(mid, 0) : nextafter(mid, INFINITY);
            break;
        }
        default: /* any finite double */
            memcpy(&v, &r, 8);
            if (!isfinite(v)) v = 0.5;
        }
        if (rng() & 1) v = -v;
        if (!nearest_ok(dt, v, inf_bits, beyond)) {
            tps_test_failed_now = 1;
            return;
        }
    }
}

TEST(dtype_from_f64_f16_nearest_even) { rounding_brute_force(TPS_DT_F16, 0x7c00, 65536.0, -30, 17); }

TEST(dtype_from_f64_bf16_nearest_even) { rounding_brute_force(TPS_DT_BF16, 0x7f80, 0x1p128, -140, 129); }

TEST(dtype_from_f64_f32_f64_exact)
{
    unsigned char buf[16];
    for (int i = 0; i < 10000; i++) {
        uint64_t r = rng();
        double v;
        memcpy(&v, &r, 8);
        if (isnan(v)) continue;
        double back;
        CHECK(tps_dtype_from_f64(TPS_DT_F64, buf, 1, v));
        CHECK(tps_dtype_to_f64(TPS_DT_F64, buf, 1, &back) && same_double(back, v));
        CHECK(tps_dtype_from_f64(TPS_DT_F32, buf, 2, v));
        CHECK(tps_dtype_to_f64(TPS_DT_F32, buf, 2, &back) && same_double(back, (double)(float)v));
    }
}

/* ---------------------------------------------------------------------------------- */
/* lib/base/buf.c */

TEST(buf_appends_and_printf)
{
    tps_buf b = TPS_BUF_INIT;
    CHECK_STR(tps_buf_cstr(&b), "");
    char want[20000];
    size_t n = 0;
    for (int i = 0; i < 1000; i++) {
        tps_buf_printf(&b, "%d:%s;", i, i % 3 ? "ab" : "");
        n += (size_t)snprintf(want + n, sizeof want - n, "%d:%s;", i, i % 3 ? "ab" : "");
    }
    tps_buf_puts(&b, "tail");
    tps_buf_putc(&b, '!');
    n += (size_t)snprintf(want + n, sizeof want - n, "tail!");
    CHECK_EQ_U64(b.len, n);
    CHECK_STR(tps_buf_cstr(&b), want);
    CHECK(b.cap > b.len);

    /* binary data with NUL bytes keeps its length */
    tps_buf_reset(&b);
    size_t cap = b.cap;
    CHECK_EQ_U64(b.len, 0);
    CHECK_STR(tps_buf_cstr(&b), "");
    CHECK_EQ_U64(b.cap, cap);
    const char bin[] = {'a', 0, 'b', 0};
    tps_buf_append(&b, bin, sizeof bin);
    tps_buf_append(&b, bin, 0);
    CHECK_EQ_U64(b.len, 4);
    CHECK(memcmp(b.data, bin, 4) == 0 && b.data[4] == '\0');

    /* a long printf (far past the first allocation) */
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    tps_buf_reset(&b);
    tps_buf_printf(&b, "<%s>", big);
    CHECK_EQ_U64(b.len, sizeof big + 1);
    CHECK(b.data[0] == '<' && b.data[b.len - 1] == '>' && b.data[b.len] == '\0');

    tps_buf_release(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0 && !b.oom);
    tps_buf_puts(&b, "again");
    CHECK_STR(tps_buf_cstr(&b), "again");
    tps_buf_release(&b);
}

TEST(buf_overflow_sets_oom)
{
    tps_buf b = TPS_BUF_INIT;
    tps_buf_puts(&b, "abc");
    tps_buf_append(&b, "x", SIZE_MAX); /* cannot fit: refused before any copy */
    CHECK(b.oom);
    CHECK(tps_buf_cstr(&b) == NULL);
    tps_buf_puts(&b, "more");
    CHECK_EQ_U64(b.len, 3); /* later appends are ignored */
    tps_buf_release(&b);
    CHECK(!b.oom);
}

/* ---------------------------------------------------------------------------------- */
/* lib/base/index.c */

#define FILE_BYTES 1000

static char tmp_path[64];

static bool make_temp_file(void)
{
    const char *dir = getenv("TMPDIR");
    snprintf(tmp_path, sizeof tmp_path, "%.40s/tps_core_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(tmp_path);
    if (fd < 0) return false;
    unsigned char data[FILE_BYTES];
    for (int i = 0; i < FILE_BYTES; i++) data[i] = (unsigned char)(i * 7 + 3);
    bool ok = write(fd, data, sizeof data) == (ssize_t)sizeof data;
    close(fd);
    return ok;
}

TEST(strpool_add_and_intern)
{
    tps_strpool *p = tps_strpool_new();
    CHECK(p);
    if (!p) return;
    /* 100,000 names across many blocks: each reads back as written */
    enum { N = 100000 };
    char **names = calloc(N, sizeof *names);
    CHECK(names);
    if (!names) return;
    for (int i = 0; i < N; i++) {
        char s[64];
        int n = snprintf(s, sizeof s, "model.layers.%d.mlp.experts.%d.w1.weight", i / 64, i % 64);
        names[i] = tps_strpool_add(p, s, (size_t)n);
        CHECK(names[i] && strcmp(names[i], s) == 0);
    }
    int bad = 0;
    for (int i = 0; i < N; i++) {
        char s[64];
        snprintf(s, sizeof s, "model.layers.%d.mlp.experts.%d.w1.weight", i / 64, i % 64);
        bad += strcmp(names[i], s) != 0;
    }
    CHECK_EQ_U64(bad, 0);
    /* a string longer than a block, between short ones */
    size_t big = 200000;
    char *b = malloc(big);
    CHECK(b);
    if (b) {
        memset(b, 'x', big);
        char *pb = tps_strpool_add(p, b, big);
        CHECK(pb && strlen(pb) == big && pb[0] == 'x');
        free(b);
    }
    CHECK(strcmp(tps_strpool_add(p, "tail", 4), "tail") == 0);
    CHECK(strcmp(names[N - 1], "model.layers.1562.mlp.experts.31.w1.weight") == 0);
    /* interned: equal strings one copy, different ones (prefixes too) not */
    char *r1 = tps_strpool_intern(p, "rule (preset:mixtral:38:5)", 26);
    char *r2 = tps_strpool_intern(p, "rule (preset:mixtral:38:5)xyz", 26);
    char *r3 = tps_strpool_intern(p, "rule (preset:mixtral:38:5", 25);
    char *r4 = tps_strpool_intern(p, "", 0);
    CHECK(r1 && r1 == r2 && r3 && r3 != r1 && strcmp(r3, "rule (preset:mixtral:38:5") == 0 && r4 && !*r4);
    /* many distinct interned strings (the table grows), each found again */
    for (int i = 0; i < 5000; i++) {
        char s[32];
        int n = snprintf(s, sizeof s, "r%d", i);
        char *a = tps_strpool_intern(p, s, (size_t)n);
        CHECK(a && strcmp(a, s) == 0);
        if (i % 7 == 0) CHECK(tps_strpool_intern(p, s, (size_t)n) == a);
    }
    CHECK(tps_strpool_intern(p, "rule (preset:mixtral:38:5)", 26) == r1);
    free(names);
    CHECK(tps_strpool_ref(p) == p); /* two references: the first unref frees nothing */
    tps_strpool_unref(p);
    CHECK(strcmp(r1, "rule (preset:mixtral:38:5)") == 0);
    tps_strpool_unref(p);
    tps_strpool_unref(NULL);
}

/* An index over the temporary file, for tests that add tensors to it; NULL on failure. */
static tps_index *index_over_temp_file(tps_error *err)
{
    tps_index *ix = NULL;
    uint32_t f;
    tps_error_clear(err);
    CHECK_EQ_U64(tps_index_new("model", "safetensors", &ix, err), TPS_OK);
    if (ix && tps_index_add_file(ix, tmp_path, &f, err) != TPS_OK) {
        CHECK(!"the temporary file could not be added");
        tps_index_free(ix);
        ix = NULL;
    }
    return ix;
}

TEST(index_reserve_exact_then_growing)
{
    tps_error err;
    tps_index *ix = index_over_temp_file(&err);
    if (!ix) return;
    /* 1,000 known up front: exactly 1,000 slots, and adding them moves nothing */
    CHECK(tps_index_reserve(ix, 1000));
    CHECK_EQ_U64(ix->tensors_cap, 1000);
    const tps_tensor *first = ix->tensors;
    const uint64_t shape[] = {1};
    for (int i = 0; i < 1000; i++) {
        char name[16];
        int n = snprintf(name, sizeof name, "t%d", i);
        CHECK_EQ_U64(tps_index_add_tensor(ix, name, (size_t)n, TPS_DT_U8, 1, shape, 0, (uint64_t)i, NULL, &err), TPS_OK);
    }
    CHECK(ix->tensors == first && ix->ntensors == 1000);
    /* a later file's reservation grows as adding would (doubling), and keeps every tensor */
    CHECK(tps_index_reserve(ix, 10));
    CHECK_EQ_U64(ix->tensors_cap, 2000);
    CHECK(tps_index_reserve(ix, 0));
    CHECK(!tps_index_reserve(ix, SIZE_MAX));
    const tps_tensor *t = tps_index_find(ix, "t999");
    CHECK(t && t->offset == 999);
    tps_index_free(ix);
}

TEST(index_tensors_and_ranges)
{
    tps_index *ix = NULL;
    tps_error err;
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_new("model", "safetensors", &ix, &err), TPS_OK);
    if (!ix) return;
    uint32_t f = 99;
    CHECK_EQ_U64(tps_index_add_file(ix, tmp_path, &f, &err), TPS_OK);
    CHECK_EQ_U64(f, 0);
    CHECK_EQ_U64(ix->files[0].size, FILE_BYTES);

    const uint64_t shape[] = {10, 10};
    CHECK_EQ_U64(tps_index_add_tensor(ix, "w", 1, TPS_DT_F32, 2, shape, 0, 0, NULL, &err), TPS_OK);
    const tps_tensor *t = tps_index_find(ix, "w");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_U64(t->nelem, 100);
        CHECK_EQ_U64(t->nbytes, 400);
        CHECK_EQ_U64(t->ndim, 2);
        /* bytes come back from the file, at the tensor's offset */
        unsigned char got[16];
        CHECK_EQ_U64(tps_tensor_read(ix, t, 384, got, sizeof got, &err), TPS_OK);
        bool same = true;
        for (int i = 0; i < 16; i++) same = same && got[i] == (unsigned char)((384 + i) * 7 + 3);
        CHECK(same);
        tps_error_clear(&err);
        CHECK_EQ_U64(tps_tensor_read(ix, t, 385, got, sizeof got, &err), TPS_EINVALID);
        CHECK_CONTAINS(err.msg, "outside tensor 'w'");
    }

    /* the last byte of the file is reachable, one past it is not */
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "end", 3, TPS_DT_F32, 2, shape, 0, FILE_BYTES - 400, NULL, &err), TPS_OK);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "past", 4, TPS_DT_F32, 2, shape, 0, FILE_BYTES - 399, NULL, &err),
                 TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "tensor 'past' needs bytes [601, 601+400) but the file has 1000 bytes");
    CHECK(tps_index_find(ix, "past") == NULL);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "wrap", 4, TPS_DT_F32, 2, shape, 0, UINT64_MAX - 100, NULL, &err),
                 TPS_EINVALID);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "nofile", 6, TPS_DT_U8, 0, NULL, 1, 0, NULL, &err), TPS_EINVALID);

    /* names: duplicates, embedded NUL, rank-0, empty name */
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "w", 1, TPS_DT_U8, 0, NULL, 0, 0, NULL, &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "duplicate tensor name 'w'");
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "a\0b", 3, TPS_DT_U8, 0, NULL, 0, 0, NULL, &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "NUL");
    CHECK(tps_index_find(ix, "a") == NULL);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "scalar", 6, TPS_DT_BF16, 0, NULL, 0, 998, NULL, &err), TPS_OK);
    t = tps_index_find(ix, "scalar");
    CHECK(t && t->nelem == 1 && t->nbytes == 2);
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "", 0, TPS_DT_U8, 1, shape, 0, 0, NULL, &err), TPS_OK);
    CHECK(tps_index_find(ix, "") != NULL);

    /* shapes: too many dims, overflowing product, a cut inside a byte */
    uint64_t dims17[17];
    for (int i = 0; i < 17; i++) dims17[i] = 1;
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "d17", 3, TPS_DT_U8, 17, dims17, 0, 0, NULL, &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "17 dimensions");
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "d16", 3, TPS_DT_U8, 16, dims17, 0, 0, NULL, &err), TPS_OK);
    const uint64_t huge[] = {1ull << 32, 1ull << 32};
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "huge", 4, TPS_DT_U8, 2, huge, 0, 0, NULL, &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "overflows");
    const uint64_t three[] = {3};
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "f4", 2, TPS_DT_F4, 1, three, 0, 0, NULL, &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "tensor 'f4': 3 elements of F4");
    const uint64_t zero[] = {2, 0};
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "empty", 5, TPS_DT_F32, 2, zero, 0, FILE_BYTES, NULL, &err), TPS_OK);

    /* metadata */
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_meta(ix, "format", "pt", &err), TPS_OK);
    CHECK_STR(tps_index_meta(ix, "format"), "pt");
    CHECK(tps_index_meta(ix, "tp_rank") == NULL);
    CHECK_EQ_U64(tps_index_add_meta(ix, "format", "np", &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "duplicate metadata key 'format'");
    tps_index_free(ix);
    tps_index_free(NULL);
}

TEST(index_lookup_10k)
{
    enum { N = 10000 };
    tps_error err;
    tps_index *ix = index_over_temp_file(&err);
    if (!ix) return;
    const uint64_t one[] = {1};
    char name[64];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.weight", i);
        if (tps_index_add_tensor(ix, name, strlen(name), TPS_DT_U8, 1, one, 0, (uint64_t)(i % FILE_BYTES), NULL,
                                 &err) != TPS_OK) {
            printf("#   %s: %s\n", name, err.msg);
            tps_test_failed_now = 1;
            break;
        }
    }
    CHECK_EQ_U64(ix->ntensors, N);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.weight", i);
        const tps_tensor *t = tps_index_find(ix, name);
        if (!t || strcmp(t->name, name) != 0 || t->offset != (uint64_t)(i % FILE_BYTES) ||
            t != &ix->tensors[i]) {
            printf("#   lookup of %s failed\n", name);
            tps_test_failed_now = 1;
            break;
        }
    }
    CHECK(tps_index_find(ix, "model.layers.10000.mlp.weight") == NULL);
    CHECK(tps_index_find(ix, "model.layers.1") == NULL);
    CHECK(tps_index_find(ix, "") == NULL);
    /* order is the order of adding */
    CHECK_STR(ix->tensors[N - 1].name, "model.layers.9999.mlp.weight");
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_add_tensor(ix, "model.layers.5000.mlp.weight", 28, TPS_DT_U8, 1, one, 0, 0, NULL, &err),
                 TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "duplicate tensor name 'model.layers.5000.mlp.weight'");
    tps_index_free(ix);
}

TEST(index_files_refused)
{
    tps_index *ix = NULL;
    tps_error err;
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_index_new("d", "safetensors", &ix, &err), TPS_OK);
    if (!ix) return;
    uint32_t f;
    const char *dir = getenv("TMPDIR");
    CHECK_EQ_U64(tps_index_add_file(ix, dir && *dir ? dir : "/tmp", &f, &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "not a regular file");
    tps_error_clear(&err);
    char missing[80];
    snprintf(missing, sizeof missing, "%s.missing", tmp_path);
    CHECK_EQ_U64(tps_index_add_file(ix, missing, &f, &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "cannot open");
    CHECK_EQ_U64(ix->nfiles, 0);
    tps_index_free(ix);
}

TEST(shape_str)
{
    char buf[64];
    const uint64_t s[] = {4096, 11008};
    tps_shape_str(s, 2, buf, sizeof buf);
    CHECK_STR(buf, "[4096, 11008]");
    tps_shape_str(NULL, 0, buf, sizeof buf);
    CHECK_STR(buf, "[]");
    const uint64_t m[] = {UINT64_MAX};
    tps_shape_str(m, 1, buf, sizeof buf);
    CHECK_STR(buf, "[18446744073709551615]");
    char small[6];
    tps_shape_str(s, 2, small, sizeof small);
    CHECK_STR(small, "[4096");
}

int main(void)
{
    RUN(checked_add_sub_edges);
    RUN(checked_mul_edges);
    RUN(checked_prod_edges);
    RUN(dtype_names_and_bits);
    RUN(dtype_nbytes);
    RUN(dtype_to_f64_exhaustive);
    RUN(dtype_to_f64_wide_and_integer);
    RUN(dtype_from_f64_f16_nearest_even);
    RUN(dtype_from_f64_bf16_nearest_even);
    RUN(dtype_from_f64_f32_f64_exact);
    RUN(buf_appends_and_printf);
    RUN(buf_overflow_sets_oom);
    RUN(strpool_add_and_intern);
    if (make_temp_file()) {
        RUN(index_tensors_and_ranges);
        RUN(index_reserve_exact_then_growing);
        RUN(index_lookup_10k);
        RUN(index_files_refused);
        unlink(tmp_path);
    } else {
        printf("not ok - index tests: cannot create a temporary file in %s: %s\n", tmp_path, strerror(errno));
        tps_test_failures++;
    }
    RUN(shape_str);
    return tps_test_done();
}
