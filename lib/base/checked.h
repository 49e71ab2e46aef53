/* Overflow-checked size arithmetic.  Every size or offset derived from a file header goes
 * through these before it is used (ggml gguf.cpp, safetensors tensor.rs `checked_mul`).
 * Each returns true on success and leaves *out untouched on overflow. */
#ifndef TPS_CHECKED_H
#define TPS_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool tps_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline bool tps_sub_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > a) return false;
    *out = a - b;
    return true;
}

static inline bool tps_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

/* Product of n dimensions; the product of zero dimensions is 1 (a rank-0 tensor). */
static inline bool tps_prod_u64(const uint64_t *dims, int n, uint64_t *out)
{
    uint64_t p = 1;
    for (int i = 0; i < n; i++)
        if (!tps_mul_u64(p, dims[i], &p)) return false;
    *out = p;
    return true;
}

/* u64 to size_t, false where size_t is narrower and the value does not fit. */
static inline bool tps_u64_to_size(uint64_t v, size_t *out)
{
    if (v > (uint64_t)SIZE_MAX) return false;
    *out = (size_t)v;
    return true;
}

#endif
