/* GPTQ / AWQ dequantization (verify/load/dequant_int.h) on words written out by hand from the
 * producers' descriptions: AutoGPTQ packs input rows sequentially into a word's fields and
 * stores zero - 1 (v1), AutoAWQ packs output columns in the order [0,2,4,6,1,3,5,7]. */
#include <stdlib.h>

#include "../../lib/base/dtype.h"
#include "../../verify/load/dequant_int.h"
#include "tps_test.h"

static uint32_t words_buf[8][64];
static int nbuf;

static tps_vt i32(const char *name, uint64_t rows, uint64_t cols, const uint32_t *w)
{
    tps_vt t = {0};
    t.name = (char *)name;
    t.dtype = TPS_DT_I32;
    t.ndim = cols ? 2 : 1;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.nelem = rows * (cols ? cols : 1);
    uint32_t *b = words_buf[nbuf++];
    memcpy(b, w, t.nelem * 4);
    t.data = b;
    return t;
}

static float fbuf[8][64];
static int nf;

static tps_vt f32(const char *name, uint64_t rows, uint64_t cols, const float *v)
{
    tps_vt t = {0};
    t.name = (char *)name;
    t.dtype = TPS_DT_F32;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.nelem = rows * cols;
    memcpy(fbuf[nf], v, t.nelem * 4);
    t.data = fbuf[nf++];
    return t;
}

static void reset(void)
{
    nbuf = nf = 0;
}

static float at(const tps_vt *w, uint64_t n, uint64_t k)
{
    return ((const float *)w->data)[n * w->shape[1] + k];
}

/* GPTQ, one output column: the word 0x76543210 holds input rows 0..7 with codes 0..7; the v1
 * zero field 7 means 8; scale 0.5: W[0][k] = (k - 8) * 0.5. */
TEST(gptq_rows_sequential_v1_zero)
{
    reset();
    uint32_t qw[8] = {0x76543210u, 0, 0, 0, 0, 0, 0, 0}; /* [1, 8]: column 0 then 1..7 */
    uint32_t qz[1] = {0x00000007u};                      /* [1, 1]: column 0's zero - 1 = 7 */
    float s[8] = {0.5f, 1, 1, 1, 1, 1, 1, 1};
    tps_vt q = i32("l.qweight", 1, 8, qw), z = i32("l.qzeros", 1, 1, qz), sc = f32("l.scales", 1, 8, s), out;
    tps_vqint p = {TPS_VQINT_GPTQ, 4, -1, true};
    tps_error err = {0};
    CHECK(tps_vdequant_int(&p, "l.weight", &q, &z, &sc, NULL, &out, &err) == TPS_OK);
    CHECK_EQ_U64(out.shape[0], 8);
    CHECK_EQ_U64(out.shape[1], 8);
    for (int k = 0; k < 8; k++) CHECK(at(&out, 0, (uint64_t)k) == (k - 8) * 0.5f);
    /* columns 1..7: code 0, zero field 0 -> zero 1 (v1), scale 1 */
    for (int n = 1; n < 8; n++) CHECK(at(&out, (uint64_t)n, 3) == -1.0f);
    tps_vt_release(&out);
    /* gptq_v2: the stored field is the zero itself */
    p.zero_minus_one = false;
    CHECK(tps_vdequant_int(&p, "l.weight", &q, &z, &sc, NULL, &out, &err) == TPS_OK);
    CHECK(at(&out, 0, 0) == -3.5f && at(&out, 0, 7) == 0.0f && at(&out, 1, 0) == 0.0f);
    tps_vt_release(&out);
}

/* A stored zero of -1 (zero 0, written by numpy's uint32 of -1) fills every field with ones:
 * the field reads 15 and the 1 added after the mask makes 16, as AutoGPTQ's QuantLinear.forward
 * computes it (zeros + 1 on the masked field), not 0. */
TEST(gptq_v1_zero_of_zero)
{
    reset();
    uint32_t qw[8] = {0x00000005u, 0, 0, 0, 0, 0, 0, 0};
    uint32_t qz[1] = {0xFFFFFFFFu};
    float s[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    tps_vt q = i32("l.qweight", 1, 8, qw), z = i32("l.qzeros", 1, 1, qz), sc = f32("l.scales", 1, 8, s), out;
    tps_vqint p = {TPS_VQINT_GPTQ, 4, -1, true};
    tps_error err = {0};
    CHECK(tps_vdequant_int(&p, "l.weight", &q, &z, &sc, NULL, &out, &err) == TPS_OK);
    CHECK(at(&out, 0, 0) == -22.0f && at(&out, 0, 1) == -32.0f && at(&out, 5, 0) == -32.0f);
    tps_vt_release(&out);
}

/* Act-order: 16 input rows, groups of 8 in permuted order (g_idx), 2 output columns... packed
 * in 8 columns (qzeros one word).  Each row's code is its k; group 0 has scale 1, group 1
 * scale 10, zeros 0 (v2).  W[0][k] = k * (g_idx[k] ? 10 : 1). */
TEST(gptq_act_order_g_idx)
{
    reset();
    uint32_t qw[16] = {0}, qz[2] = {0, 0}, gi[16];
    for (int n = 0; n < 8; n++) qw[n] = 0x76543210u, qw[8 + n] = 0xFEDCBA98u;
    for (int k = 0; k < 16; k++) gi[k] = (uint32_t)((k * 5) % 16 < 8 ? 1 : 0);
    float s[16];
    for (int n = 0; n < 8; n++) s[n] = 1, s[8 + n] = 10;
    tps_vt q = i32("l.qweight", 2, 8, qw), z = i32("l.qzeros", 2, 1, qz), sc = f32("l.scales", 2, 8, s),
           g = i32("l.g_idx", 16, 0, gi), out;
    tps_vqint p = {TPS_VQINT_GPTQ, 4, 8, false};
    tps_error err = {0};
    CHECK(tps_vdequant_int(&p, "l.weight", &q, &z, &sc, &g, &out, &err) == TPS_OK);
    for (int k = 0; k < 16; k++) CHECK(at(&out, 2, (uint64_t)k) == (float)k * (gi[k] ? 10.0f : 1.0f));
    tps_vt_release(&out);

    /* A rank's row slice with its scales cut by groups: g_idx [8, 8, ...] (global), the one
     * scale row it holds is group 8's. */
    reset();
    uint32_t qw2[8], qz2[1] = {0}, gi2[8];
    for (int n = 0; n < 8; n++) qw2[n] = 0x11111111u;
    for (int k = 0; k < 8; k++) gi2[k] = 8;
    float s2[8] = {3, 3, 3, 3, 3, 3, 3, 3};
    q = i32("l.qweight", 1, 8, qw2), z = i32("l.qzeros", 1, 1, qz2), sc = f32("l.scales", 1, 8, s2);
    g = i32("l.g_idx", 8, 0, gi2);
    CHECK(tps_vdequant_int(&p, "l.weight", &q, &z, &sc, &g, &out, &err) == TPS_OK);
    CHECK(at(&out, 7, 7) == 3.0f);
    tps_vt_release(&out);

    /* Two groups named where one scale row is held: a cut that split act-order scales. */
    gi2[3] = 9;
    tps_error_clear(&err);
    g = i32("l.g_idx", 8, 0, gi2);
    CHECK(tps_vdequant_int(&p, "l.weight", &q, &z, &sc, &g, &out, &err) == TPS_EMISMATCH);
    CHECK_CONTAINS(err.msg, "l.g_idx: row 3 names group 9");
    CHECK(out.data == NULL);
}

/* AWQ: the word 0x76543210 of row 0 holds codes 0..7 in nibbles 0..7, nibble i for column
 * [0,2,4,6,1,3,5,7][i], so columns 0..7 read 0,4,1,5,2,6,3,7; zeros packed the same way. */
TEST(awq_interleaved_columns)
{
    reset();
    uint32_t qw[2] = {0x76543210u, 0x76543210u}; /* [2, 1]: rows 0 and 1 */
    uint32_t qz[1] = {0x00000001u};              /* nibble 0: column 0's zero is 1 */
    float s[8] = {1, 1, 1, 1, 1, 1, 1, 0.25f};
    tps_vt q = i32("a.qweight", 2, 1, qw), z = i32("a.qzeros", 1, 1, qz), sc = f32("a.scales", 1, 8, s), out;
    tps_vqint p = {TPS_VQINT_AWQ, 4, 2, false};
    tps_error err = {0};
    CHECK(tps_vdequant_int(&p, "a.weight", &q, &z, &sc, NULL, &out, &err) == TPS_OK);
    static const float want[8] = {-1, 4, 1, 5, 2, 6, 3, 7 * 0.25f};
    for (int n = 0; n < 8; n++) CHECK(at(&out, (uint64_t)n, 0) == want[n] && at(&out, (uint64_t)n, 1) == want[n]);
    tps_vt_release(&out);

    /* Group rows that do not match the input rows in groups of 2: named. */
    p.group = 1;
    tps_error_clear(&err);
    CHECK(tps_vdequant_int(&p, "a.weight", &q, &z, &sc, NULL, &out, &err) == TPS_EMISMATCH);
    CHECK_CONTAINS(err.msg, "a.scales: 1 group rows where 2 input rows in groups of 1 need 2");
}

TEST(shapes_that_do_not_fit_are_named)
{
    reset();
    uint32_t qw[8] = {0}, qz[1] = {0};
    float s[8] = {0};
    tps_vt q = i32("l.qweight", 1, 8, qw), z = i32("l.qzeros", 1, 1, qz), sc = f32("l.scales", 1, 4, s), out;
    tps_vqint p = {TPS_VQINT_GPTQ, 4, 8, true};
    tps_error err = {0};
    CHECK(tps_vdequant_int(&p, "l.weight", &q, &z, &sc, NULL, &out, &err) == TPS_EMISMATCH);
    CHECK_CONTAINS(err.msg, "l.scales: expected float [groups, 8]");
    sc = f32("l.scales", 1, 8, s);
    z = i32("l.qzeros", 1, 1, qz);
    z.shape[1] = 2;
    tps_error_clear(&err);
    CHECK(tps_vdequant_int(&p, "l.weight", &q, &z, &sc, NULL, &out, &err) == TPS_EMISMATCH);
    CHECK_CONTAINS(err.msg, "l.qzeros: expected I32 [1, 1]");
    p.bits = 3;
    tps_error_clear(&err);
    CHECK(tps_vdequant_int(&p, "l.weight", &q, &z, &sc, NULL, &out, &err) == TPS_EINVALID);
}

int main(void)
{
    RUN(gptq_rows_sequential_v1_zero);
    RUN(gptq_v1_zero_of_zero);
    RUN(gptq_act_order_g_idx);
    RUN(awq_interleaved_columns);
    RUN(shapes_that_do_not_fit_are_named);
    return tps_test_done();
}
