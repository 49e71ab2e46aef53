#include "crc.h"

#include <stdatomic.h>
#include <zlib.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Folding constants for the bit-reflected polynomial 0xEDB88320: x^(4*128+32), x^(4*128-32)
 * mod P (4-way fold), x^(128+32), x^(128-32) mod P (1-way fold), x^64 mod P, and the
 * Barrett pair P' and mu, from the paper above. */
static const uint64_t k1k2[2] __attribute__((aligned(16))) = {0x0154442bd4, 0x01c6e41596};
static const uint64_t k3k4[2] __attribute__((aligned(16))) = {0x01751997d0, 0x00ccaa009e};
static const uint64_t k5k0[2] __attribute__((aligned(16))) = {0x0163cd6124, 0x0000000000};
static const uint64_t poly[2] __attribute__((aligned(16))) = {0x01db710641, 0x01f7011641};

/* Four 128-bit lanes folded up to the end of the data (len a multiple of 16, may be 0),
 * then into one, then Barrett-reduced to the 32-bit CRC register. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t fold_tail(__m128i x1, __m128i x2, __m128i x3, __m128i x4,
                                                                   const unsigned char *buf, size_t len)
{
    __m128i x0, x5;
    x0 = _mm_load_si128((const __m128i *)k3k4);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64, then Barrett reduction to 32. */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

/* len >= 64 and a multiple of 16; crc is the raw (pre-inverted) register. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t fold(const unsigned char *buf, size_t len, uint32_t crc)
{
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    return fold_tail(x1, x2, x3, x4, buf, len);
}

/* x^(2048+32) and x^(2048-32) mod P, reflected like the constants above (the same formula at
 * a fold distance of four 512-bit registers, 256 bytes). */
static const uint64_t k2048[2] __attribute__((aligned(16))) = {0x011542778a, 0x01322d1430};

/* The same fold, 512 bits per instruction: four zmm registers (16 lanes) fold 256 bytes a
 * step; they are then folded into one zmm, whose four lanes are exactly the four lanes of
 * the 128-bit fold above at the same point, so fold_tail finishes.  len >= 256, a multiple
 * of 16. */
__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1"))) static uint32_t fold512(const unsigned char *buf,
                                                                                               size_t len, uint32_t crc)
{
    __m512i k = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)k2048));
    __m512i z0 = _mm512_loadu_si512((const void *)(buf + 0x00));
    __m512i z1 = _mm512_loadu_si512((const void *)(buf + 0x40));
    __m512i z2 = _mm512_loadu_si512((const void *)(buf + 0x80));
    __m512i z3 = _mm512_loadu_si512((const void *)(buf + 0xc0));
    z0 = _mm512_xor_si512(z0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
    buf += 256;
    len -= 256;
#define FOLD512(z, kk, next) \
    _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z, kk, 0x00), _mm512_clmulepi64_epi128(z, kk, 0x11), next, 0x96)
    while (len >= 256) {
        z0 = FOLD512(z0, k, _mm512_loadu_si512((const void *)(buf + 0x00)));
        z1 = FOLD512(z1, k, _mm512_loadu_si512((const void *)(buf + 0x40)));
        z2 = FOLD512(z2, k, _mm512_loadu_si512((const void *)(buf + 0x80)));
        z3 = FOLD512(z3, k, _mm512_loadu_si512((const void *)(buf + 0xc0)));
        buf += 256;
        len -= 256;
    }
    k = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)k1k2)); /* one register on: 512 bits */
    z0 = FOLD512(z0, k, z1);
    z0 = FOLD512(z0, k, z2);
    z0 = FOLD512(z0, k, z3);
    while (len >= 64) {
        z0 = FOLD512(z0, k, _mm512_loadu_si512((const void *)buf));
        buf += 64;
        len -= 64;
    }
#undef FOLD512
    return fold_tail(_mm512_extracti32x4_epi32(z0, 0), _mm512_extracti32x4_epi32(z0, 1),
                     _mm512_extracti32x4_epi32(z0, 2), _mm512_extracti32x4_epi32(z0, 3), buf, len);
}

/* What the CPU has, found once: threads may race to fill it in; they all store the same
 * value, and atomically. */
static tps_crc_impl best(void)
{
    static _Atomic int have = -1;
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        __builtin_cpu_init();
        h = TPS_CRC_ZLIB;
        if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) h = TPS_CRC_PCLMUL;
        if (h == TPS_CRC_PCLMUL && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("vpclmulqdq"))
            h = TPS_CRC_VPCLMUL;
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return (tps_crc_impl)h;
}

static uint32_t crc_with(tps_crc_impl impl, uint32_t crc, const unsigned char *p, size_t len)
{
    if (impl >= TPS_CRC_PCLMUL && len >= 64) {
        size_t n = len & ~(size_t)15;
        crc = ~(impl == TPS_CRC_VPCLMUL && n >= 256 ? fold512(p, n, ~crc) : fold(p, n, ~crc));
        p += n;
        len -= n;
    }
    return len ? (uint32_t)crc32_z(crc, p, len) : crc;
}

uint32_t tps_crc32(uint32_t crc, const void *buf, size_t len)
{
    return crc_with(best(), crc, buf, len);
}

bool tps_crc32_impl(tps_crc_impl impl, uint32_t crc, const void *buf, size_t len, uint32_t *out)
{
    if (impl > best()) return false;
    *out = crc_with(impl, crc, buf, len);
    return true;
}

#else

uint32_t tps_crc32(uint32_t crc, const void *buf, size_t len)
{
    return (uint32_t)crc32_z(crc, buf, len);
}

bool tps_crc32_impl(tps_crc_impl impl, uint32_t crc, const void *buf, size_t len, uint32_t *out)
{
    if (impl != TPS_CRC_ZLIB) return false;
    *out = (uint32_t)crc32_z(crc, buf, len);
    return true;
}

#endif
