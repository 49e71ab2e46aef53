/* The reference's float64 block kernels (see ref_kernel.h) and the choice among them, the BF16
 * widening both sides' weights take, and the reference's device.
 *
 * One kernel per instruction set, each shaped for its registers (ref_kernel_tmpl.h), chosen
 * once at the first call.  Not GCC's target_clones of one loop: written for AVX-512's eight
 * 64-byte accumulators, its AVX2 clone kept them on the stack (sixteen 32-byte registers)
 * and ran some fifty times slower than the AVX-512 one (issue 46; docs/verification.md).  Not the BLAS's dgemm either:
 * its summation order is its own and changes with the CPU and the library's version, while
 * these add each product in k order with no fused multiply-add, so that every CPU computes the
 * same reference bits as the plain float64 loops (tests/unit/test_verify_ref_kernels.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_kernel.h"

/* Each product rounded, then each sum: Clang contracts a * b + c into an FMA by default
 * (GCC does not in C11 mode). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Not under ThreadSanitizer: the clones' ifunc resolver runs while the program is relocated,
 * before the TSan runtime is up, and every process then dies at start (SIGSEGV).  (Only the
 * BF16 widening below is cloned; the kernels are chosen by a plain call.) */
#if defined(__SANITIZE_THREAD__) && !defined(TPS_NO_CLONES)
#define TPS_NO_CLONES 1
#endif
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && !defined(TPS_NO_CLONES)
#define VBF16_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef VBF16_CLONES
#define VBF16_CLONES
#endif

#if defined(__GNUC__)
#define VK_FN block_portable
#define VK_ATTR
#define VK_L 2
#include "ref_kernel_tmpl.h"
#else
/* No vector extensions: the plain loops, in the same order. */
static void block_portable(size_t kc, const double *w, size_t ldw, const double *xt,
                           double acc[TPS_VREF_R][TPS_VREF_T])
{
    for (size_t k = 0; k < kc; k++)
        for (int r = 0; r < TPS_VREF_R; r++)
            for (int t = 0; t < TPS_VREF_T; t++) acc[r][t] += w[(size_t)r * ldw + k] * xt[k * TPS_VREF_T + t];
}
#endif

static bool runs_always(void)
{
    return true;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define VREF_X86 1
#define VK_FN block_avx2
#define VK_ATTR __attribute__((target("avx2")))
#define VK_L 4
#include "ref_kernel_tmpl.h"
#define VK_FN block_avx512
#define VK_ATTR __attribute__((target("avx512f")))
#define VK_L 8
#include "ref_kernel_tmpl.h"

/* __builtin_cpu_supports also asks whether the OS saves the wider registers (XGETBV). */
static bool runs_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}

static bool runs_avx512(void)
{
    return __builtin_cpu_supports("avx512f");
}
#endif

/* Narrowest first: the choice is the last one that runs here. */
static const tps_vref_kernel kernels[] = {
    {"portable", block_portable, runs_always},
#ifdef VREF_X86
    {"avx2", block_avx2, runs_avx2},
    {"avx512", block_avx512, runs_avx512},
#endif
};
enum { NKERNELS = sizeof kernels / sizeof *kernels };

const tps_vref_kernel *tps_vref_kernels(size_t *n)
{
    *n = NKERNELS;
    return kernels;
}

static const tps_vref_kernel *kernel_named(const char *name)
{
    for (size_t i = 0; i < NKERNELS; i++)
        if (strcmp(kernels[i].name, name) == 0) return &kernels[i];
    return NULL;
}

/* The widest kernel the CPU runs, unless want (TPS_VREF_KERNEL) names another it runs. */
static const tps_vref_kernel *choose(const char *want)
{
    const tps_vref_kernel *best = &kernels[0];
    for (size_t i = 1; i < NKERNELS; i++)
        if (kernels[i].runs_here()) best = &kernels[i];
    if (!want || !*want) return best;
    const tps_vref_kernel *k = kernel_named(want);
    if (k && k->runs_here()) return k;
    char why[96] = "this CPU cannot run it";
    if (!k) {
        snprintf(why, sizeof why, "not a kernel of this build (");
        for (size_t i = 0; i < NKERNELS; i++)
            snprintf(why + strlen(why), sizeof why - strlen(why), "%s%s", kernels[i].name, i + 1 < NKERNELS ? ", " : ")");
    }
    fprintf(stderr, "tpshard: TPS_VREF_KERNEL=%s: %s; the reference runs its %s kernel\n", want, why, best->name);
    return best;
}

static _Atomic(const tps_vref_kernel *) current;
static pthread_once_t current_once = PTHREAD_ONCE_INIT;

static void choose_first(void)
{
    const tps_vref_kernel *none = NULL;
    atomic_compare_exchange_strong(&current, &none, choose(getenv("TPS_VREF_KERNEL")));
}

static const tps_vref_kernel *kernel_now(void)
{
    const tps_vref_kernel *k = atomic_load_explicit(&current, memory_order_acquire);
    if (k) return k;
    pthread_once(&current_once, choose_first);
    return atomic_load_explicit(&current, memory_order_acquire);
}

void tps_vref_block(size_t kc, const double *w, size_t ldw, const double *xt, double acc[TPS_VREF_R][TPS_VREF_T])
{
    kernel_now()->block(kc, w, ldw, xt, acc);
}

const char *tps_vref_kernel_name(void)
{
    return kernel_now()->name;
}

bool tps_vref_kernel_force(const char *name)
{
    const tps_vref_kernel *k = name ? kernel_named(name) : choose(getenv("TPS_VREF_KERNEL"));
    if (!k || !k->runs_here()) return false;
    pthread_once(&current_once, choose_first); /* so that a later first call cannot undo it */
    atomic_store_explicit(&current, k, memory_order_release);
    return true;
}

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

VBF16_CLONES
void tps_vbf16_f64(const unsigned char *p, size_t n, double *out)
{
    VBF16_BODY(vbf_f64)
}

VBF16_CLONES
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
