/* Reads every good torch/NumPy fixture and compares names, dtypes, shapes and bytes with
 * FIXTURE.expect, which testdata/gen_torch_fixtures.py wrote from torch/numpy values. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/open/checkpoint.h"
#include "tps_test.h"

static const char *top(void)
{
    const char *t = getenv("TPS_TOP");
    return t && *t ? t : ".";
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Compares one fixture with its .expect; reads each tensor whole and in 3-byte pieces
 * (partial elements, many small gathers) when small. */
static void check_fixture(const char *rel, const char *expect_rel)
{
    char path[1024], epath[1024];
    snprintf(path, sizeof path, "%s/testdata/torch/%s", top(), rel);
    snprintf(epath, sizeof epath, "%s/testdata/torch/%s.expect", top(), expect_rel ? expect_rel : rel);
    tps_error err;
    tps_error_clear(&err);
    tps_index *ix = NULL;
    if (tps_checkpoint_open(path, &ix, &err) != TPS_OK) {
        printf("#   %s: %s\n", rel, err.msg);
        CHECK(!"fixture opens");
        return;
    }
    FILE *f = fopen(epath, "r");
    CHECK(f != NULL);
    size_t lines = 0;
    static char line[1 << 20];
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        char *name = strtok(line, "\t"), *dt = strtok(NULL, "\t"), *shape = NULL, *hex = NULL;
        /* An empty shape field ("" for 0-d) makes strtok skip it: tell by counting tabs. */
        char *rest = dt + strlen(dt) + 1;
        if (*rest == '\t') {
            shape = "";
            hex = strtok(rest + 1, "\t\n");
        } else {
            shape = strtok(NULL, "\t");
            hex = strtok(NULL, "\t\n");
        }
        if (!hex) hex = "";
        const tps_tensor *t = tps_index_find(ix, name);
        if (!t) {
            printf("#   %s: tensor '%s' missing\n", rel, name);
            CHECK(t != NULL);
            continue;
        }
        CHECK_STR(tps_dtype_name(t->dtype), dt);
        char got[256] = "";
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
        CHECK_STR(got, shape);
        size_t n = strlen(hex) / 2;
        CHECK_EQ_U64(t->nbytes, n);
        unsigned char *want = malloc(n + 1), *have = calloc(n + 1, 1);
        for (size_t i = 0; i < n; i++) want[i] = (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
        if (t->nbytes == n) {
            tps_status st = tps_tensor_read(ix, t, 0, have, n, &err);
            if (st) printf("#   %s: %s\n", name, err.msg);
            CHECK_EQ_U64(st, TPS_OK);
            if (memcmp(have, want, n) != 0) {
                printf("#   %s: tensor '%s' bytes differ from torch/numpy\n", rel, name);
                CHECK(!"bytes equal");
            }
            memset(have, 0, n);
            /* Small pieces only for small tensors: a deflated Fortran-order member re-inflates
             * from its start for each backward step (zip.h), quadratic by design here. */
            for (size_t off = 0; off < n && n <= 4096 && !st; off += 3) {
                size_t len = n - off < 3 ? n - off : 3;
                st = tps_tensor_read(ix, t, off, have + off, len, &err);
            }
            CHECK_EQ_U64(st, TPS_OK);
            CHECK(n > 4096 || memcmp(have, want, n) == 0);
        }
        free(want);
        free(have);
    }
    if (f) fclose(f);
    CHECK_EQ_U64(ix->ntensors, lines);
    tps_index_free(ix);
}

TEST(llama_bf16_bin) { check_fixture("llama_bf16.bin", NULL); }
TEST(views_shared_storage_offsets_transposed) { check_fixture("views.bin", NULL); }
TEST(nested_state_dict) { check_fixture("nested_state_dict.bin", NULL); }
TEST(nested_model_with_optimizer) { check_fixture("nested_model.bin", NULL); }
TEST(all_torch_dtypes) { check_fixture("all_dtypes.bin", NULL); }
TEST(parameters) { check_fixture("parameters.bin", NULL); }
TEST(bigendian_archive) { check_fixture("bigendian.bin", NULL); }
TEST(float8_uint16_rebuild_v3) { check_fixture("float8_v3.bin", NULL); }
TEST(npz_stored) { check_fixture("stored.npz", NULL); }
TEST(npz_deflated) { check_fixture("compressed.npz", NULL); }
TEST(npz_deflated_large) { check_fixture("big_compressed.npz", NULL); }
TEST(npz_zip64_central_directory) { check_fixture("zip64_central.npz", NULL); }
TEST(npy_c_order) { check_fixture("c_order.npy", NULL); }
TEST(npy_fortran_order) { check_fixture("fortran.npy", NULL); }
TEST(npy_bigendian_v2) { check_fixture("bigendian.npy", NULL); }
TEST(npy_v3) { check_fixture("v3.npy", NULL); }
TEST(multi_file_index) { check_fixture("multi/pytorch_model.bin.index.json", NULL); }
TEST(multi_file_directory) { check_fixture("multi", "multi/pytorch_model.bin.index.json"); }

/* The fast path: which tensors are plain file ranges read in place, and which need a view. */
TEST(plain_ranges_where_possible)
{
    struct {
        const char *file, *tensor;
        bool plain;
    } cases[] = {
        {"llama_bf16.bin", "model.layers.1.mlp.down_proj.weight", true},
        {"views.bin", "view_a", true},        /* offset 2, C-contiguous */
        {"views.bin", "view_b", false},       /* transposed */
        {"views.bin", "cols", false},         /* column slice */
        {"bigendian.bin", "w", false},        /* byte swap */
        {"bigendian.bin", "h", false},
        {"stored.npz", "w", true},
        {"stored.npz", "mask", true},
        {"stored.npz", "be", false},
        {"stored.npz", "fort", false},
        {"compressed.npz", "w", false},       /* deflated */
        {"c_order.npy", "c_order", true},
        {"fortran.npy", "fortran", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/testdata/torch/%s", top(), cases[i].file);
        tps_error err;
        tps_error_clear(&err);
        tps_index *ix = NULL;
        CHECK_EQ_U64(tps_checkpoint_open(path, &ix, &err), TPS_OK);
        const tps_tensor *t = ix ? tps_index_find(ix, cases[i].tensor) : NULL;
        CHECK(t != NULL);
        if (t && (t->reader_data == NULL) != cases[i].plain) {
            printf("#   %s:%s plain=%d expected %d\n", cases[i].file, cases[i].tensor, t->reader_data == NULL, cases[i].plain);
            CHECK(!"plain/view as expected");
        }
        tps_index_free(ix);
    }
}

/* Every truncation of a torch archive is refused as invalid input, never crashes. */
TEST(every_truncation_refused)
{
    char path[1024], tmp[] = "/tmp/tps-trunc-XXXXXX";
    snprintf(path, sizeof path, "%s/testdata/torch/views.bin", top());
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int fd = mkstemp(tmp);
    CHECK(fd >= 0);
    size_t refused = 0;
    for (size_t len = 0; len < n; len++) {
        if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, len, 0) != (ssize_t)len) break;
        tps_error err;
        tps_error_clear(&err);
        tps_index *ix = NULL;
        tps_status st = tps_checkpoint_open(tmp, &ix, &err);
        if (st == TPS_EINVALID) refused++;
        else printf("#   prefix of %zu bytes: status %d\n", len, st);
        tps_index_free(ix);
    }
    CHECK_EQ_U64(refused, n);
    close(fd);
    unlink(tmp);
}

/* Flipping any single byte either is refused as invalid or still reads every tensor. */
TEST(every_byte_flip_handled)
{
    char path[1024], tmp[] = "/tmp/tps-flip-XXXXXX";
    snprintf(path, sizeof path, "%s/testdata/torch/views.bin", top());
    FILE *f = fopen(path, "rb");
    if (!f) {
        CHECK(f != NULL);
        return;
    }
    static unsigned char buf[1 << 16], out[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int fd = mkstemp(tmp);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        buf[i] ^= 0x5a;
        if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, n, 0) != (ssize_t)n) break;
        buf[i] ^= 0x5a;
        tps_error err;
        tps_error_clear(&err);
        tps_index *ix = NULL;
        tps_status st = tps_checkpoint_open(tmp, &ix, &err);
        if (st == TPS_OK) {
            for (size_t k = 0; k < ix->ntensors && !st; k++)
                if (ix->tensors[k].nbytes <= sizeof out) st = tps_tensor_read(ix, &ix->tensors[k], 0, out, ix->tensors[k].nbytes, &err);
        }
        if (st != TPS_OK && st != TPS_EINVALID) {
            printf("#   flip at %zu: status %d: %s\n", i, st, err.msg);
            bad++;
        }
        tps_index_free(ix);
    }
    CHECK_EQ_U64(bad, 0);
    close(fd);
    unlink(tmp);
}

/* A safetensors file whose header length is 0x0280 starts with the bytes of a protocol-2
 * pickle (80 02); it must still open as safetensors, not be refused as a legacy pickle. */
TEST(safetensors_starting_like_a_pickle)
{
    char tmp[] = "/tmp/tps-st-XXXXXX";
    unsigned char buf[8 + 640];
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"}}";
    memset(buf, ' ', sizeof buf);
    buf[0] = 0x80;
    buf[1] = 0x02;
    memset(buf + 2, 0, 6);
    memcpy(buf + 8, json, strlen(json));
    int fd = mkstemp(tmp);
    CHECK(fd >= 0 && write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);
    tps_error err;
    tps_error_clear(&err);
    tps_index *ix = NULL;
    tps_status st = tps_checkpoint_open(tmp, &ix, &err);
    if (st) printf("#   %s\n", err.msg);
    CHECK_EQ_U64(st, TPS_OK);
    if (ix) CHECK_STR(ix->format, "safetensors");
    tps_index_free(ix);
    close(fd);
    unlink(tmp);
}

int main(void)
{
    RUN(llama_bf16_bin);
    RUN(views_shared_storage_offsets_transposed);
    RUN(nested_state_dict);
    RUN(nested_model_with_optimizer);
    RUN(all_torch_dtypes);
    RUN(parameters);
    RUN(bigendian_archive);
    RUN(float8_uint16_rebuild_v3);
    RUN(npz_stored);
    RUN(npz_deflated);
    RUN(npz_deflated_large);
    RUN(npz_zip64_central_directory);
    RUN(npy_c_order);
    RUN(npy_fortran_order);
    RUN(npy_bigendian_v2);
    RUN(npy_v3);
    RUN(multi_file_index);
    RUN(multi_file_directory);
    RUN(plain_ranges_where_possible);
    RUN(every_truncation_refused);
    RUN(every_byte_flip_handled);
    RUN(safetensors_starting_like_a_pickle);
    return tps_test_done();
}
