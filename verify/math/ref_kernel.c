/* The reference's float64 register-blocked kernel; see ref_kernel.h.  Written as plain loops
 * the compiler vectorizes across the 16 tokens (never across k, so the sums keep their order
 * and need no -ffast-math); on x86-64 GCC and Clang also build it for AVX2+FMA and AVX-512
 * and pick one at load time, the portable build staying SSE2. */
#include <stdint.h>
#include <string.h>

#include "ref_kernel.h"

/* Not under ThreadSanitizer: the clones' ifunc resolver runs while the program is relocated,
 * before the TSan runtime is up, and every process then dies at start (SIGSEGV). */
#if defined(__SANITIZE_THREAD__) && !defined(TPS_NO_CLONES)
#define TPS_NO_CLONES 1
#endif
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && !defined(TPS_NO_CLONES)
#define VREF_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef VREF_CLONES
#define VREF_CLONES
#endif

#if defined(__GNUC__)

/* Eight float64 lanes: one AVX-512 register, two AVX2 ones, four SSE2 ones. */
typedef double v8d __attribute__((vector_size(64)));

VREF_CLONES
void tps_vref_block(size_t kc, const double *w, size_t ldw, const double *xt, double acc[TPS_VREF_R][TPS_VREF_T])
{
    /* The 64 sums in eight named vectors, so that they stay in registers (plain arrays
     * indexed [r][t] stay in memory at -O2); loads by memcpy, which makes no alignment claim. */
    v8d a[8], x0, x1;
    memcpy(a, acc, sizeof a);
    v8d a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5], a6 = a[6], a7 = a[7];
    const double *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    for (size_t k = 0; k < kc; k++) {
        memcpy(&x0, xt + k * TPS_VREF_T, sizeof x0);
        memcpy(&x1, xt + k * TPS_VREF_T + 8, sizeof x1);
        a0 += w0[k] * x0;
        a1 += w0[k] * x1;
        a2 += w1[k] * x0;
        a3 += w1[k] * x1;
        a4 += w2[k] * x0;
        a5 += w2[k] * x1;
        a6 += w3[k] * x0;
        a7 += w3[k] * x1;
    }
    a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, a[4] = a4, a[5] = a5, a[6] = a6, a[7] = a7;
    memcpy(acc, a, sizeof a);
}
#else
void tps_vref_block(size_t kc, const double *w, size_t ldw, const double *xt, double acc[TPS_VREF_R][TPS_VREF_T])
{
    for (size_t k = 0; k < kc; k++)
        for (int r = 0; r < TPS_VREF_R; r++)
            for (int t = 0; t < TPS_VREF_T; t++) acc[r][t] += w[(size_t)r * ldw + k] * xt[k * TPS_VREF_T + t];
}
#endif

/* BF16 is the high half of a float32: shift into place, reinterpret, widen.  On a
 * little-endian host a 16-bit load reads the file's bytes in order; blocks of 16 let the
 * compiler vectorize at -O2 (a fixed trip count), the tail goes one by one. */
static inline float vbf16_at(const unsigned char *p, size_t i)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    uint32_t u = (uint32_t)h << 16;
#else
    uint32_t u = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
#endif
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#if defined(__has_builtin) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#if __has_builtin(__builtin_convertvector)
#define VBF16_VECTOR 1
#endif
#endif

#ifdef VBF16_VECTOR
/* Sixteen at a time in vector types (the compiler does not vectorize the scalar loop at -O2:
 * it would need a run-time check that p and out do not overlap). */
typedef uint16_t vbf_u16 __attribute__((vector_size(32)));
typedef uint32_t vbf_u32 __attribute__((vector_size(64)));
typedef float vbf_f32 __attribute__((vector_size(64)));
typedef double vbf_f64 __attribute__((vector_size(128)));
#define VBF16_BODY(VOUT)                                                                        \
    size_t i = 0;                                                                               \
    for (; i + 16 <= n; i += 16) {                                                              \
        vbf_u16 h;                                                                              \
        memcpy(&h, p + 2 * i, sizeof h);                                                        \
        vbf_u32 u = __builtin_convertvector(h, vbf_u32) << 16;                                  \
        vbf_f32 f;                                                                              \
        memcpy(&f, &u, sizeof f);                                                               \
        VOUT o = __builtin_convertvector(f, VOUT);                                              \
        memcpy(out + i, &o, sizeof o);                                                          \
    }                                                                                           \
    for (; i < n; i++) out[i] = vbf16_at(p, i);
#else
#define VBF16_BODY(VOUT)                                                                        \
    for (size_t i = 0; i < n; i++) out[i] = vbf16_at(p, i);
#endif

VREF_CLONES
void tps_vbf16_f64(const unsigned char *p, size_t n, double *out)
{
    VBF16_BODY(vbf_f64)
}

VREF_CLONES
void tps_vbf16_f32(const unsigned char *p, size_t n, float *out)
{
    VBF16_BODY(vbf_f32)
}

static tps_vref_dev *ref_device;

void tps_vref_use_device(tps_vref_dev *d)
{
    ref_device = d;
}

tps_vref_dev *tps_vref_device(void)
{
    return ref_device;
}
