/* Look-ups by name (issue 14, item 9): tps_name_hash, and the manifest's tensor and file
 * hashes built by the loader, which also refuse names listed twice. */
#include <stdlib.h>

#include "lib/set/manifest.h"
#include "tps_test.h"

typedef struct rec {
    uint64_t payload;
    char *name;
} rec;

static char *name_of(size_t i)
{
    char buf[64];
    snprintf(buf, sizeof buf, "model.layers.%zu.mlp.experts.%zu.w1.weight", i / 200, i % 200);
    return strdup(buf);
}

/* The array is reallocated as it grows, as the index's and the loader's are: the hash keeps
 * indexes, so every record is still found after the moves. */
TEST(name_hash_finds_every_record_and_refuses_repeats)
{
    enum { N = 20000 };
    tps_name_hash h = TPS_NAME_HASH_INIT(rec, name);
    rec *r = NULL;
    size_t n = 0, cap = 0, dup;
    for (size_t i = 0; i < N; i++) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4;
            r = realloc(r, cap * sizeof *r);
        }
        r[n] = (rec){i * 7, name_of(i)};
        CHECK(tps_name_hash_add(&h, r, n, &dup));
        CHECK_EQ_U64(dup, SIZE_MAX);
        n++;
    }
    CHECK(h.cap >= 2 * N); /* at most half full */
    for (size_t i = 0; i < N; i++) {
        char *want = name_of(i);
        size_t got = tps_name_hash_find(&h, r, want);
        CHECK_EQ_U64(got, i);
        if (got < n) CHECK_EQ_U64(r[got].payload, i * 7);
        free(want);
    }
    CHECK_EQ_U64(tps_name_hash_find(&h, r, "model.layers.0.mlp.experts.0.w1"), SIZE_MAX);
    CHECK_EQ_U64(tps_name_hash_find(&h, r, ""), SIZE_MAX);
    /* A repeat names the earlier record and is not added. */
    r[n] = (rec){0, name_of(12345)};
    CHECK(tps_name_hash_add(&h, r, n, &dup));
    CHECK_EQ_U64(dup, 12345);
    CHECK_EQ_U64(tps_name_hash_find(&h, r, r[n].name), 12345);
    free(r[n].name);
    for (size_t i = 0; i < n; i++) free(r[i].name);
    free(r);
    tps_name_hash_free(&h);
    CHECK(h.slot == NULL && h.cap == 0);
    tps_name_hash empty = TPS_NAME_HASH_INIT(rec, name);
    CHECK_EQ_U64(tps_name_hash_find(&empty, NULL, "x"), SIZE_MAX);
}

/* A manifest of n replicated [2] F32 tensors t0..t{n-1} and tp files f0..f{tp-1}. */
static tps_manifest *make_manifest(size_t n, uint64_t tp)
{
    tps_manifest *m = calloc(1, sizeof *m);
    m->version = TPS_MANIFEST_VERSION;
    m->tp = tp;
    m->tensors = calloc(n, sizeof *m->tensors);
    m->files = calloc(tp, sizeof *m->files);
    for (size_t i = 0; i < n; i++) {
        tps_manifest_tensor *t = &m->tensors[m->ntensors++];
        char buf[32];
        snprintf(buf, sizeof buf, "t%zu", i);
        t->name = strdup(buf);
        t->rule = strdup("r");
        t->dtype = TPS_DT_F32;
        t->ndim = 1;
        t->shape[0] = 2;
        t->nbytes = 8;
        CHECK_EQ_U64(tps_manifest_set_part(m, t, &(tps_partition){.replicated = true}, NULL), TPS_OK);
    }
    for (uint64_t r = 0; r < tp; r++) {
        tps_manifest_file *f = &m->files[m->nfiles++];
        char buf[32];
        snprintf(buf, sizeof buf, "f%llu", (unsigned long long)r);
        f->name = strdup(buf);
        f->rank = r;
    }
    return m;
}

/* Emits m and loads the text back (NULL and the message in err when refused). */
static tps_manifest *round_trip(const tps_manifest *m, tps_error *err)
{
    tps_buf b = TPS_BUF_INIT;
    tps_manifest *back = NULL;
    tps_error_clear(err);
    if (tps_manifest_to_json(m, &b, err) == TPS_OK) tps_manifest_parse(b.data, b.len, "test.json", &back, err);
    tps_buf_release(&b);
    return back;
}

TEST(manifest_finds_tensors_and_files_by_hash)
{
    enum { N = 5000 };
    tps_manifest *m = make_manifest(N, 3);
    /* Built by hand and never indexed: still found (by a scan). */
    CHECK(tps_manifest_find(m, "t4321") == &m->tensors[4321]);
    CHECK(tps_manifest_find_file(m, "f2") == &m->files[2]);
    tps_error err;
    tps_manifest *back = round_trip(m, &err);
    CHECK(back != NULL);
    if (back) {
        CHECK(back->tensor_names.cap >= 2 * N); /* the loader built the hash */
        for (size_t i = 0; i < N; i += 97) {
            char buf[32];
            snprintf(buf, sizeof buf, "t%zu", i);
            const tps_manifest_tensor *t = tps_manifest_find(back, buf);
            CHECK(t == &back->tensors[i]);
        }
        CHECK(tps_manifest_find(back, "t5000") == NULL);
        CHECK(tps_manifest_find(back, "t") == NULL);
        const tps_manifest_file *f = tps_manifest_find_file(back, "f1");
        CHECK(f && f->rank == 1);
        CHECK(tps_manifest_find_file(back, "f3") == NULL);
        /* Every tensor is cut the same way (replicated): one partition, shared by all. */
        CHECK(back->tensors[0].part->replicated && back->tensors[N - 1].part == back->tensors[0].part);
        CHECK_EQ_U64(tps_partpool_count(back->parts), 1);
    }
    tps_manifest_index(m, "hand-built", &err); /* the builder's way to the hash */
    CHECK(m->tensor_names.cap > 0 && tps_manifest_find(m, "t17") == &m->tensors[17]);
    tps_manifest_free(back);
    tps_manifest_free(m);
}

TEST(manifest_refuses_names_listed_twice)
{
    tps_manifest *m = make_manifest(3000, 2);
    free(m->tensors[2999].name); /* the last repeats one near the start */
    m->tensors[2999].name = strdup("t5");
    tps_error err;
    tps_manifest *back = round_trip(m, &err);
    CHECK(back == NULL);
    CHECK(strstr(err.msg, "tensor 't5' is listed twice") != NULL);
    tps_manifest_free(back);
    tps_manifest_free(m);

    m = make_manifest(10, 2); /* one file name for ranks 0 and 1 */
    free(m->files[1].name);
    m->files[1].name = strdup("f0");
    back = round_trip(m, &err);
    CHECK(back == NULL);
    CHECK(strstr(err.msg, "file 'f0' (rank 1 part 0) is listed twice") != NULL);
    tps_manifest_free(back);
    tps_manifest_free(m);

    m = make_manifest(10, 2); /* two files for rank 0 part 0 */
    m->files[1].rank = 0;
    back = round_trip(m, &err);
    CHECK(back == NULL);
    CHECK(strstr(err.msg, "(rank 0 part 0) is listed twice") != NULL);
    tps_manifest_free(back);
    tps_manifest_free(m);
}

int main(void)
{
    RUN(name_hash_finds_every_record_and_refuses_repeats);
    RUN(manifest_finds_tensors_and_files_by_hash);
    RUN(manifest_refuses_names_listed_twice);
    return tps_test_done();
}
