/* The LM head by vocabulary chunks (verify/driver/head_rows.h) against a brute-force float64
 * sum over the whole matrix: a source that hands out 3 rows at a time, so every chunk but
 * the first starts past row 0 and the last is short; a rank's slice of another shape is
 * reported through what it saw, not computed; a NaN is named at its place in the whole
 * tensor, not in its chunk. */
#include <math.h>
#include <stdlib.h>

#include "../../verify/driver/head_rows.h"
#include "tps_test.h"

enum { V = 11, H = 5, N = 2, CH = 3 };

typedef struct mat {
    float w[V * H];
    uint64_t rows, cols;
} mat;

static bool mat_has(void *ctx, const char *name)
{
    (void)ctx;
    return strcmp(name, "head") == 0;
}

static tps_status mat_load(void *ctx, const char *name, tps_vt *out, tps_error *err)
{
    (void)ctx;
    (void)out;
    return tps_fail(err, TPS_EINVALID, "%s: whole loads are not expected", name);
}

static tps_status mat_rows(void *ctx, const char *name, uint64_t chunk, tps_vrows_fn fn, void *arg, tps_error *err)
{
    mat *m = ctx;
    uint64_t per = chunk < CH ? chunk : CH;
    for (uint64_t r = 0; r < m->rows; r += per) {
        uint64_t k = m->rows - r < per ? m->rows - r : per;
        tps_vt part = {.name = (char *)name, .dtype = TPS_DT_F32, .ndim = 2, .shape = {k, m->cols},
                       .nelem = k * m->cols, .data = m->w + r * m->cols};
        tps_status st = fn(arg, r, &part, err);
        if (st) return st;
    }
    return TPS_OK;
}

static void fill(mat *m, double *x)
{
    m->rows = V, m->cols = H;
    for (int i = 0; i < V * H; i++) m->w[i] = (float)((i * 37 % 23) - 11) / 8.0f;
    for (int i = 0; i < N * H; i++) x[i] = (double)((i * 13 % 7) - 3) / 4.0;
}

static double want(const mat *m, const double *x, int t, int v)
{
    double s = 0;
    for (int k = 0; k < H; k++) s += (double)m->w[v * H + k] * x[t * H + k];
    return s;
}

TEST(reference_logits_by_chunks_equal_the_whole_product)
{
    mat m;
    double x[N * H], y[N * (V + 1)]; /* room for the refused call's vocabulary too */
    fill(&m, x);
    tps_vsource src = {&m, mat_load, mat_has, mat_rows, NULL};
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_vhead_streams(&src, "head"));
    CHECK(tps_vhead_ref_logits(&src, "head", V, H, N, x, true, y, &err) == TPS_OK);
    for (int t = 0; t < N; t++)
        for (int v = 0; v < V; v++) CHECK(fabs(y[t * V + v] - want(&m, x, t, v)) < 1e-12);
    /* a head with fewer rows than the vocabulary is refused */
    CHECK(tps_vhead_ref_logits(&src, "head", V + 1, H, N, x, true, y, &err) == TPS_EINVALID);
}

TEST(rank_logits_by_chunks_land_at_their_rows)
{
    mat m;
    double x[N * H];
    float xf[N * H], y[N * (V + 2)];
    fill(&m, x);
    for (int i = 0; i < N * H; i++) xf[i] = (float)x[i];
    for (int i = 0; i < N * (V + 2); i++) y[i] = -99;
    tps_vsource src = {&m, mat_load, mat_has, mat_rows, NULL};
    tps_error err;
    tps_error_clear(&err);
    vhead_seen seen;
    CHECK(tps_vhead_rank_logits(&src, "head", V, H, N, xf, NULL, y + 1, V + 2, &seen, &err) == TPS_OK);
    CHECK_EQ_U64(seen.rows, V);
    CHECK_EQ_U64(seen.cols, H);
    CHECK(seen.dtype == TPS_DT_F32);
    for (int t = 0; t < N; t++) {
        CHECK(y[t * (V + 2)] == -99 && y[t * (V + 2) + V + 1] == -99); /* nothing outside the rank's columns */
        for (int v = 0; v < V; v++) CHECK(fabs(y[t * (V + 2) + 1 + v] - want(&m, x, t, v)) < 1e-5);
    }
    /* a slice of more rows than the rank's share: what it held is reported, nothing past the
     * share is written */
    for (int i = 0; i < N * (V + 2); i++) y[i] = -99;
    CHECK(tps_vhead_rank_logits(&src, "head", 6, H, N, xf, NULL, y, V + 2, &seen, &err) == TPS_OK);
    CHECK_EQ_U64(seen.rows, V);
    for (int t = 0; t < N; t++)
        for (int v = 6; v < V + 2; v++) CHECK(y[t * (V + 2) + v] == -99);
}

TEST(a_nan_is_named_at_its_place_in_the_whole_head)
{
    mat m;
    double x[N * H], y[N * V];
    fill(&m, x);
    m.w[7 * H + 2] = NAN;
    tps_vsource src = {&m, mat_load, mat_has, mat_rows, NULL};
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_vhead_ref_logits(&src, "head", V, H, N, x, true, y, &err) == TPS_EINVALID);
    CHECK(strstr(err.msg, "the first at [7, 2] (element 37)") != NULL);
    if (!strstr(err.msg, "[7, 2]")) printf("#   %s\n", err.msg);
}

int main(void)
{
    RUN(reference_logits_by_chunks_equal_the_whole_product);
    RUN(rank_logits_by_chunks_land_at_their_rows);
    RUN(a_nan_is_named_at_its_place_in_the_whole_head);
    return tps_test_done();
}
