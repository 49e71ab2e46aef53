/* Small helpers every folder of verify/ may use. */
#ifndef TPS_VERIFY_MATH_UTIL_H
#define TPS_VERIFY_MATH_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Seconds on the monotonic clock (the reports' times). */
double tps_vnow(void);

/* Appends printf-style text to the NUL-terminated buf of size bytes, truncating (the
 * reports' detail strings). */
void tps_vappendf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* splitmix64 (Steele, Lea, Flood 2014): a tiny, well-mixed, portable stream. */
static inline uint64_t tps_vsplitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
