/* Parts per rank (tps_cut_opts.max_part_bytes) and dtype conversion while splitting.
 *
 * Parts: the tiny Llama fixture is cut at tp 2 with a small cap; each part is opened on its
 * own with the safetensors reader (another path than the shard set's), and the expectations
 * (every tensor exactly once per rank, parts within the cap, the rank index naming the file
 * that really holds each tensor, the global bytes equal to the source's) are checked against
 * what those files and the source hold.  Conversion: expected bits come from the compiler's
 * own conversions (_Float16 casts, the float cast) and the bit-level bf16 rounding rule, not
 * from lib/base/dtype.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/open/checkpoint.h"
#include "formats/safetensors/safetensors.h"
#include "formats/open/shardset.h"
#include "lib/base/json.h"
#include "lib/engine/convert.h"
#include "lib/engine/cut.h"
#include "lib/engine/outdir.h"
#include "lib/engine/publish.h"
#include "lib/engine/write_set.h"
#include "lib/layout/layout.h"
#include "lib/set/plan.h"
#include "tps_test.h"

#define FIXTURE "testdata/models/tiny-llama"

static tps_status read_source(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    const tps_index *ix = ctx;
    return tps_tensor_read(ix, &ix->tensors[i], off, buf, len, err);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 20);
    *len = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
    if (b) b[*len] = 0;
    fclose(f);
    return b;
}

/* Splits the fixture at tp into out (removed first); returns the manifest. */
static tps_manifest *split_fixture(uint64_t tp, const tps_cut_opts *o, const char *out, tps_index **ixp,
                                   tps_status *stp, tps_error *err)
{
    tps_layout *l = NULL;
    tps_manifest *m = NULL;
    tps_buf problems = TPS_BUF_INIT, unused = TPS_BUF_INIT;
    tps_remove_tree(out);
    tps_status st = tps_layout_load_preset("llama", &l, err);
    if (!st) st = tps_layout_read_config(l, FIXTURE "/config.json", NULL, err);
    if (!st) st = tps_checkpoint_open(FIXTURE, ixp, err);
    if (!st) st = tps_plan_build(*ixp, l, "preset:llama", tp, &m, &problems, &unused, err);
    const char *inputs[] = {FIXTURE, NULL};
    tps_write_opts wo = {.out = out, .kind = TPS_OUT_SHARDSET, .inputs = inputs, .cut = *o};
    wo.cut.sink = &tps_safetensors_sink;
    if (!st) st = tps_write_set(m, read_source, *ixp, &wo, err);
    tps_layout_free(l);
    tps_buf_release(&problems);
    tps_buf_release(&unused);
    *stp = st;
    return m;
}

TEST(parts_hold_each_tensor_once_within_the_cap)
{
    tps_error err;
    tps_error_clear(&err);
    tps_index *src = NULL;
    tps_status st;
    const uint64_t cap = 3000;
    const char *out = "/tmp/tps-unit-parts";
    tps_cut_opts o = {.max_part_bytes = cap};
    tps_manifest *m = split_fixture(2, &o, out, &src, &st, &err);
    CHECK_EQ_U64(st, TPS_OK);
    if (st) {
        printf("#   %s\n", err.msg);
        goto done;
    }
    for (uint64_t r = 0; r < 2; r++) {
        size_t seen = 0, nparts = 0;
        char idx_name[256], path[512];
        CHECK_EQ_U64(tps_format_name(TPS_RANK_INDEX_TEMPLATE, r, 2, 0, idx_name, sizeof idx_name, &err), TPS_OK);
        snprintf(path, sizeof path, "%s/%s", out, idx_name);
        size_t len = 0;
        char *text = slurp(path, &len);
        CHECK(text != NULL);
        tps_json_doc *doc = NULL;
        CHECK(text && tps_json_parse(text, len, path, &doc, &err) == TPS_OK);
        const tps_json *wm = doc ? tps_json_get(tps_json_root(doc), "weight_map") : NULL;
        const tps_json *md = doc ? tps_json_get(tps_json_root(doc), "metadata") : NULL;
        const tps_json *ts = md ? tps_json_get(md, "total_size") : NULL;
        uint64_t total = 0;
        for (size_t f = 0; f < m->nfiles; f++) {
            if (m->files[f].rank != r) continue;
            nparts++;
            char fp[512];
            snprintf(fp, sizeof fp, "%s/%s", out, m->files[f].name);
            char want[256];
            snprintf(want, sizeof want, "model-rank-%llu-part-%zu.safetensors", (unsigned long long)r, nparts - 1);
            CHECK_STR(m->files[f].name, want);
            tps_index *part = NULL;
            char part_of[TPS_ERROR_MSG_MAX]; /* one part of the rank's set, which tps_checkpoint_open refuses */
            CHECK_EQ_U64(tps_checkpoint_open_part(fp, &part, part_of, sizeof part_of, &err), TPS_OK);
            if (!part) continue;
            uint64_t bytes = 0;
            for (size_t k = 0; k < part->ntensors; k++) {
                const tps_tensor *x = &part->tensors[k];
                bytes += x->nbytes;
                seen++;
                const tps_json *v = wm ? tps_json_get(wm, x->name) : NULL;
                CHECK(v && v->type == TPS_JSON_STRING && strcmp(v->u.string.s, m->files[f].name) == 0);
            }
            total += bytes;
            CHECK(bytes <= cap || part->ntensors == 1);
            tps_index_free(part);
        }
        CHECK(nparts > 2);
        CHECK_EQ_U64(seen, m->ntensors);
        CHECK(wm && wm->type == TPS_JSON_OBJECT && wm->u.object.n == m->ntensors);
        CHECK(ts && ts->type == TPS_JSON_NUMBER && ts->u.number.is_u64 && ts->u.number.u64 == total);
        tps_json_doc_free(doc);
        free(text);
    }
    /* The shard set reads back, through the manifest's parts, to the source bytes. */
    tps_shardset *ss = NULL;
    CHECK_EQ_U64(tps_shardset_open(out, &ss, &err), TPS_OK);
    for (size_t i = 0; ss && i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &ss->m->tensors[i];
        const tps_tensor *x = tps_index_find(src, t->name);
        unsigned char *a = malloc(t->nbytes + 1), *b = malloc(t->nbytes + 1);
        CHECK(x && a && b);
        if (x && a && b) {
            CHECK_EQ_U64(tps_shardset_read_global(ss, t, 0, a, t->nbytes, &err), TPS_OK);
            CHECK_EQ_U64(tps_tensor_read(src, x, 0, b, x->nbytes, &err), TPS_OK);
            CHECK(memcmp(a, b, t->nbytes) == 0);
        }
        free(a);
        free(b);
    }
    tps_shardset_free(ss);
done:
    tps_manifest_free(m);
    tps_index_free(src);
    tps_remove_tree(out);
}

TEST(parts_without_a_part_placeholder_are_refused)
{
    tps_error err;
    tps_error_clear(&err);
    tps_index *src = NULL;
    tps_status st;
    tps_cut_opts o = {.max_part_bytes = 3000, .name_template = "rank{rank}.safetensors"};
    tps_manifest *m = split_fixture(2, &o, "/tmp/tps-unit-parts-refused", &src, &st, &err);
    CHECK_EQ_U64(st, TPS_EARG);
    CHECK_CONTAINS(err.msg, "{part}");
    CHECK(access("/tmp/tps-unit-parts-refused", F_OK) != 0);
    tps_manifest_free(m);
    tps_index_free(src);
}

TEST(no_cap_gives_one_file_per_rank_and_no_index)
{
    tps_error err;
    tps_error_clear(&err);
    tps_index *src = NULL;
    tps_status st;
    const char *out = "/tmp/tps-unit-noparts";
    tps_cut_opts o = {0};
    tps_manifest *m = split_fixture(4, &o, out, &src, &st, &err);
    CHECK_EQ_U64(st, TPS_OK);
    CHECK_EQ_U64(m ? m->nfiles : 0, 4);
    CHECK(access("/tmp/tps-unit-noparts/model-rank-0-of-4.safetensors.index.json", F_OK) != 0);
    tps_manifest_free(m);
    tps_index_free(src);
    tps_remove_tree(out);
}

/* ---- conversion ---- */

typedef struct mem_src {
    const void *data;
    size_t len;
} mem_src;

static tps_status read_mem(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    (void)i;
    const mem_src *s = ctx;
    if (off + len > s->len) return tps_fail(err, TPS_EIO, "read past the end");
    memcpy(buf, (const char *)s->data + off, len);
    return TPS_OK;
}

static uint16_t bf16_rne(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static const float samples[] = {0.0f,       -0.0f,      1.0f,        -2.5f,       3.14159265f, 1e-8f,
                                65504.0f,   65520.0f,   1e6f,        -1e30f,      1.00390625f, 1.01171875f,
                                6.1e-5f,    5.96e-8f,   2.98e-8f,    1.0000001f,  -7.0e-39f,   3.0e38f};

static float sample(size_t k)
{
    size_t n = sizeof samples / sizeof samples[0];
    if (k < n) return samples[k];
    if (k == n) return INFINITY;
    if (k == n + 1) return -INFINITY;
    if (k == n + 2) return NAN;
    return (float)((double)(k * 2654435761u % 100003u) / 977.0 - 50.0); /* deterministic spread */
}

/* One F32 tensor of N elements converted to `to`, read back in pieces of odd sizes at odd
 * offsets; each target element is compared with the compiler's conversion. */
static void convert_f32_to(tps_dtype to)
{
    enum { N = 4099 };
    static float in[N];
    for (size_t k = 0; k < N; k++) in[k] = sample(k);
    tps_manifest_tensor t = {.name = (char *)"w", .dtype = TPS_DT_F32, .ndim = 1, .shape = {N}, .nbytes = sizeof in};
    tps_manifest m = {.tp = 1, .tensors = &t, .ntensors = 1};
    mem_src s = {in, sizeof in};
    tps_convert *cv = NULL;
    tps_error err;
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_convert_begin(&m, to, read_mem, &s, &cv, &err), TPS_OK);
    size_t ts = to == TPS_DT_F32 ? 4 : 2;
    CHECK_EQ_U64(t.nbytes, N * ts);
    CHECK_EQ_U64(t.dtype, to);
    unsigned char *out = calloc(N, ts);
    for (uint64_t at = 0; cv && at < t.nbytes;) {
        size_t len = 1 + (size_t)(at * 7 % 1013); /* pieces start and end inside elements */
        if (at + len > t.nbytes) len = (size_t)(t.nbytes - at);
        CHECK_EQ_U64(tps_convert_read(cv, 0, at, out + at, len, &err), TPS_OK);
        at += len;
    }
    size_t bad = 0;
    for (size_t k = 0; k < N; k++) {
        uint16_t got16;
        memcpy(&got16, out + k * 2, 2);
        if (to == TPS_DT_BF16) {
            if (got16 != bf16_rne(in[k])) bad++;
        } else if (to == TPS_DT_F16) {
            _Float16 h = (_Float16)in[k];
            uint16_t want;
            memcpy(&want, &h, 2);
            if (isnan(in[k]) ? (got16 & 0x7c00) != 0x7c00 || !(got16 & 0x3ff) : got16 != want) bad++;
        }
    }
    if (to == TPS_DT_F32) CHECK(memcmp(out, in, sizeof in) == 0);
    CHECK_EQ_U64(bad, 0);
    free(out);
    tps_convert_free(cv);
}

TEST(convert_f32_to_bf16_rounds_to_nearest_even) { convert_f32_to(TPS_DT_BF16); }
TEST(convert_f32_to_f16_matches_the_compiler) { convert_f32_to(TPS_DT_F16); }
TEST(convert_to_the_same_dtype_passes_bytes_through) { convert_f32_to(TPS_DT_F32); }

TEST(convert_bf16_to_f32_is_exact)
{
    enum { N = 1000 };
    uint16_t in[N];
    for (size_t k = 0; k < N; k++) in[k] = (uint16_t)(k * 40503u);
    in[0] = 0x7fc0; /* NaN */
    tps_manifest_tensor t = {.name = (char *)"b", .dtype = TPS_DT_BF16, .ndim = 2, .shape = {10, 100}, .nbytes = sizeof in};
    tps_manifest m = {.tp = 1, .tensors = &t, .ntensors = 1};
    mem_src s = {in, sizeof in};
    tps_convert *cv = NULL;
    tps_error err;
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_convert_begin(&m, TPS_DT_F32, read_mem, &s, &cv, &err), TPS_OK);
    uint32_t out[N];
    CHECK_EQ_U64(cv ? tps_convert_read(cv, 0, 0, out, sizeof out, &err) : 99, TPS_OK);
    size_t bad = 0;
    for (size_t k = 0; k < N; k++) {
        uint32_t want = (uint32_t)in[k] << 16;
        if ((want & 0x7fffffffu) > 0x7f800000u ? (out[k] & 0x7fffffffu) <= 0x7f800000u : out[k] != want) bad++;
    }
    CHECK_EQ_U64(bad, 0);
    tps_convert_free(cv);
}

TEST(convert_refuses_integer_and_float8_tensors_by_name)
{
    tps_manifest_tensor t[2] = {{.name = (char *)"ok", .dtype = TPS_DT_F32, .ndim = 1, .shape = {4}, .nbytes = 16},
                                {.name = (char *)"scales", .dtype = TPS_DT_F8_E4M3, .ndim = 1, .shape = {4}, .nbytes = 4}};
    tps_manifest m = {.tp = 1, .tensors = t, .ntensors = 2};
    tps_convert *cv = NULL;
    tps_error err;
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_convert_begin(&m, TPS_DT_BF16, read_mem, NULL, &cv, &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "'scales'");
    CHECK_CONTAINS(err.msg, "F8_E4M3");
    CHECK(cv == NULL);
    CHECK_EQ_U64(t[0].dtype, TPS_DT_F32); /* nothing rewritten on refusal */
    t[1].dtype = TPS_DT_I32;
    tps_error_clear(&err);
    CHECK_EQ_U64(tps_convert_begin(&m, TPS_DT_F16, read_mem, NULL, &cv, &err), TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "I32");
}

TEST(convert_parses_cli_names)
{
    tps_dtype dt;
    CHECK(tps_convert_parse_dtype("bf16", &dt) && dt == TPS_DT_BF16);
    CHECK(tps_convert_parse_dtype("FP16", &dt) && dt == TPS_DT_F16);
    CHECK(tps_convert_parse_dtype("f32", &dt) && dt == TPS_DT_F32);
    CHECK(!tps_convert_parse_dtype("f64", &dt));
    CHECK(!tps_convert_parse_dtype("int8", &dt));
}

int main(void)
{
    RUN(parts_hold_each_tensor_once_within_the_cap);
    RUN(parts_without_a_part_placeholder_are_refused);
    RUN(no_cap_gives_one_file_per_rank_and_no_index);
    RUN(convert_f32_to_bf16_rounds_to_nearest_even);
    RUN(convert_f32_to_f16_matches_the_compiler);
    RUN(convert_to_the_same_dtype_passes_bytes_through);
    RUN(convert_bf16_to_f32_is_exact);
    RUN(convert_refuses_integer_and_float8_tensors_by_name);
    RUN(convert_parses_cli_names);
    return tps_test_done();
}
