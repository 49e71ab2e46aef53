/* tps_target_swap_read (lib/targets/target.h: blocked rows and transposes read in the other order)
 * against the definition, element by element: every byte range of [X, Y, block] arrays
 * stored [Y, X, block], for the gather path (small blocks, ranges of whole elements) and the
 * run path (large blocks, ranges that start or end inside an element). */
#include <stdlib.h>

#include "lib/targets/target.h"
#include "tps_test.h"

typedef struct mem {
    const unsigned char *p;
    unsigned calls;
} mem;

static tps_status mem_read(void *ctx, uint64_t off, void *buf, size_t len, tps_error *err)
{
    (void)err;
    mem *m = ctx;
    m->calls++;
    memcpy(buf, m->p + off, len);
    return TPS_OK;
}

/* The requested array's byte i, from the stored one, by the definition. */
static unsigned char want(const unsigned char *stored, uint64_t i, uint64_t X, uint64_t Y, uint64_t block)
{
    uint64_t e = i / block, c = i % block, x = e / Y, y = e % Y;
    return stored[(y * X + x) * block + c];
}

static int check_all(uint64_t X, uint64_t Y, uint64_t block, size_t step)
{
    size_t n = (size_t)(X * Y * block);
    unsigned char *stored = malloc(n), *got = malloc(n + 1);
    for (size_t i = 0; i < n; i++) stored[i] = (unsigned char)(i * 131 + 7 + i / 256);
    int bad = 0;
    for (size_t off = 0; off <= n; off += step)
        for (size_t len = 0; off + len <= n; len += step) {
            mem m = {stored, 0};
            tps_error err;
            tps_error_clear(&err);
            if (tps_target_swap_read(mem_read, &m, off, got, len, X, Y, block, &err)) {
                bad++;
                continue;
            }
            for (size_t i = 0; i < len; i++)
                if (got[i] != want(stored, off + i, X, Y, block)) {
                    if (bad++ < 3)
                        printf("#   X %llu Y %llu block %llu: byte %zu of [%zu, +%zu) differs\n", (unsigned long long)X,
                               (unsigned long long)Y, (unsigned long long)block, i, off, len);
                    break;
                }
        }
    free(stored);
    free(got);
    return bad;
}

TEST(swap_read_transpose_every_range) /* the gather path: elements of 1, 2 and 4 bytes */
{
    CHECK(check_all(5, 3, 4, 1) == 0);
    CHECK(check_all(3, 7, 2, 1) == 0);
    CHECK(check_all(1, 6, 1, 1) == 0);
    CHECK(check_all(6, 1, 4, 1) == 0);
    CHECK(check_all(9, 8, 4, 4) == 0);
}

TEST(swap_read_blocks_every_range) /* the run path: blocks of head_dim rows, cut anywhere */
{
    CHECK(check_all(3, 2, 512, 37) == 0); /* offsets and lengths in steps of 37 bytes */
    CHECK(check_all(2, 3, 600, 41) == 0);
}

TEST(swap_read_gather_reads_once_per_stored_row)
{
    enum { X = 64, Y = 16, B = 4 };
    unsigned char *stored = calloc(X * Y, B), *got = malloc(X * Y * B);
    mem m = {stored, 0};
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_target_swap_read(mem_read, &m, 0, got, X * Y * B, X, Y, B, &err) == TPS_OK);
    CHECK_EQ_U64(m.calls, Y);
    free(stored);
    free(got);
}

int main(void)
{
    RUN(swap_read_transpose_every_range);
    RUN(swap_read_blocks_every_range);
    RUN(swap_read_gather_reads_once_per_stored_row);
    return tps_test_done();
}
