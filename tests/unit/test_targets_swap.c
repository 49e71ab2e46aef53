/* tps_target_swap_read (lib/targets/target.h: blocked rows and transposes read in the other order)
 * against the definition, element by element: every byte range of [X, Y, block] arrays
 * stored [Y, X, block], for the gather path (small blocks, ranges of whole elements) and the
 * run path (large blocks, ranges that start or end inside an element); tps_target_view_read of
 * a 3-D transpose and of rope halves against their views' definitions. */
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

/* tps_target_view_read of a manifest tensor against the definition of its view: a 3-D
 * transpose ([E, a, b] read as [E, b, a], GPT-OSS's experts) and rope halves (each head's rows
 * [u/2, 2] read as [2, u/2], Llama 4's q/k), every range of whole elements. */
static int check_view(tps_manifest_tensor *t, size_t es, uint64_t (*src_of)(const tps_manifest_tensor *, uint64_t))
{
    size_t n = (size_t)t->nbytes;
    unsigned char *stored = malloc(n), *got = malloc(n + 1);
    for (size_t i = 0; i < n; i++) stored[i] = (unsigned char)(i * 131 + 7 + i / 256);
    int bad = 0;
    for (size_t off = 0; off <= n; off += es)
        for (size_t len = 0; off + len <= n; len += es) {
            mem m = {stored, 0};
            tps_error err;
            tps_error_clear(&err);
            if (tps_target_view_read(t, 2, mem_read, &m, off, got, len, &err)) {
                if (bad++ < 3) printf("#   %s: %s\n", t->name, err.msg);
                continue;
            }
            for (size_t i = 0; i < len; i++)
                if (got[i] != stored[src_of(t, (off + i) / es) * es + (off + i) % es]) {
                    if (bad++ < 3) printf("#   %s: byte %zu of [%zu, +%zu) differs\n", t->name, i, off, len);
                    break;
                }
        }
    free(stored);
    free(got);
    return bad;
}

/* View element v of [E, b, a] is source element (e, i, j) of [E, a, b] with v = (e, j, i). */
static uint64_t transposed_src(const tps_manifest_tensor *t, uint64_t v)
{
    uint64_t a = t->shape[1], b = t->shape[2], e = v / (a * b), r = v % (a * b), j = r / a, i = r % a;
    return e * a * b + i * b + j;
}

/* View row (h, k, p) of a head's [2, u/2] rows is source row (h, p, k) of [u/2, 2]. */
static uint64_t halves_src(const tps_manifest_tensor *t, uint64_t v)
{
    uint64_t u = t->part->seg[0].unit, in = t->shape[1], row = v / in, c = v % in;
    uint64_t h = row / u, w = row % u, k = w / (u / 2), p = w % (u / 2);
    return (h * u + p * 2 + k) * in + c;
}

TEST(view_read_3d_transpose_and_rope_halves)
{
    tps_partition pt = {.dim = 1, .nseg = 1};
    pt.seg[0].length = 4;
    pt.seg[0].unit = 1;
    tps_manifest_tensor t = {.name = (char *)"experts.down_proj", .dtype = TPS_DT_BF16, .ndim = 3, .shape = {3, 4, 5},
                             .nbytes = 3 * 4 * 5 * 2, .part = &pt, .target_transpose = true};
    CHECK(check_view(&t, 2, transposed_src) == 0);
    uint64_t fs[TPS_MAX_DIMS] = {3, 4, 5};
    tps_target_file_shape(&t, fs);
    CHECK(fs[0] == 3 && fs[1] == 5 && fs[2] == 4);
    tps_partition fp;
    tps_target_file_partition(&t, &fp);
    CHECK_EQ_U64((uint64_t)fp.dim, 2); /* down_proj's I (dim 1) is the file's last dim */
    tps_partition ph = {.dim = 0, .nseg = 1};
    ph.seg[0].length = 3 * 8;
    ph.seg[0].unit = 8;
    tps_manifest_tensor q = {.name = (char *)"q_proj.weight", .dtype = TPS_DT_F32, .ndim = 2, .shape = {3 * 8, 3},
                             .nbytes = 3 * 8 * 3 * 4, .part = &ph, .target_rope_halves = true};
    CHECK(check_view(&q, 4, halves_src) == 0);
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_target_permute_check(&q, 2, &err) == TPS_OK);
    ph.seg[0].unit = 3; /* an odd head cannot be halved */
    CHECK(tps_target_permute_check(&q, 2, &err) == TPS_EINVALID);
}

int main(void)
{
    RUN(swap_read_transpose_every_range);
    RUN(swap_read_blocks_every_range);
    RUN(swap_read_gather_reads_once_per_stored_row);
    RUN(view_read_3d_transpose_and_rope_halves);
    return tps_test_done();
}
