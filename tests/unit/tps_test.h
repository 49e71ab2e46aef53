/* A minimal unit-test harness.  Each test binary prints one TAP-style line per test,
 * "ok - NAME" or "not ok - NAME", with the failed expectation (file:line and the values)
 * above it; tests/run.sh counts those lines across all binaries.  Usage:
 *
 *   TEST(json_escapes_quotes) { CHECK(...); CHECK_EQ_U64(a, b); }
 *   int main(void) { RUN(json_escapes_quotes); return tps_test_done(); }
 */
#ifndef TPS_TEST_H
#define TPS_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int tps_test_failed_now;
static int tps_test_failures;

#define TEST(name) static void test_##name(void)

#define RUN(name)                                                     \
    do {                                                              \
        tps_test_failed_now = 0;                                      \
        test_##name();                                                \
        printf("%s - %s\n", tps_test_failed_now ? "not ok" : "ok", #name); \
        if (tps_test_failed_now) tps_test_failures++;                 \
        fflush(stdout);                                               \
    } while (0)

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("#   %s:%d: expected %s\n", __FILE__, __LINE__, #cond);   \
            tps_test_failed_now = 1;                                         \
        }                                                                    \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                    \
    do {                                                                                      \
        uint64_t va_ = (uint64_t)(a), vb_ = (uint64_t)(b);                                    \
        if (va_ != vb_) {                                                                     \
            printf("#   %s:%d: %s == %s: %" PRIu64 " != %" PRIu64 "\n", __FILE__, __LINE__, #a, \
                   #b, va_, vb_);                                                             \
            tps_test_failed_now = 1;                                                          \
        }                                                                                     \
    } while (0)

#define CHECK_STR(a, b)                                                                   \
    do {                                                                                  \
        const char *sa_ = (a), *sb_ = (b);                                                \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0) {                                      \
            printf("#   %s:%d: %s == %s: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, #b, \
                   sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                           \
            tps_test_failed_now = 1;                                                      \
        }                                                                                 \
    } while (0)

/* True when haystack contains needle; prints both otherwise. */
#define CHECK_CONTAINS(hay, needle)                                                         \
    do {                                                                                    \
        const char *h_ = (hay), *n_ = (needle);                                             \
        if (!h_ || !strstr(h_, n_)) {                                                       \
            printf("#   %s:%d: \"%s\" should contain \"%s\"\n", __FILE__, __LINE__,         \
                   h_ ? h_ : "(null)", n_);                                                 \
            tps_test_failed_now = 1;                                                        \
        }                                                                                   \
    } while (0)

/* A uniform double in [0, 1) from a 64-bit LCG: the same sequence on every platform, so
 * seeded synthetic weights are the same everywhere. */
static inline double tps_test_uniform(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*state >> 11) / 9007199254740992.0;
}

static inline int tps_test_done(void) { return tps_test_failures ? 1 : 0; }

#endif
