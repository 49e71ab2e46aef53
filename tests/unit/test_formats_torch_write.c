/* The torch archive sink (formats/torch/torch_write.h) read back by the project's own torch reader
 * (formats/torch/torch.h, written from torch's files, not from this writer): tensors of several
 * dtypes streamed in pieces that straddle records, alternately through write and
 * write_crc, read back bit-equal; the commit's CRC-32 and size are the file's; a counting
 * file gives the same; forced ZIP64 still reads; refusals leave no file.  What torch itself
 * makes of the files is tests/interop/torch/debian/test_torch_write.py. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/torch/pickle_write.h"
#include "formats/torch/torch.h"
#include "formats/torch/torch_write.h"
#include "lib/base/crc.h"
#include "tps_fsize.h"
#include "tps_test.h"

static char scratch[] = "/tmp/tps_torch_write_XXXXXX";

typedef struct tensor {
    const char *name;
    tps_dtype dt;
    int ndim;
    uint64_t shape[3];
    size_t nbytes;
    unsigned char *data;
} tensor;

static tensor tensors[] = {
    {"w", TPS_DT_BF16, 2, {5, 7}, 70, NULL},   {"empty", TPS_DT_F32, 2, {0, 4}, 0, NULL},
    {"e2", TPS_DT_I64, 1, {0}, 0, NULL},       {"s", TPS_DT_F16, 0, {0}, 2, NULL},
    {"ids", TPS_DT_I64, 1, {300}, 2400, NULL}, {"f8", TPS_DT_F8_E4M3, 2, {3, 3}, 9, NULL},
    {"m", TPS_DT_BOOL, 1, {3}, 3, NULL},
};
#define NT (sizeof tensors / sizeof tensors[0])

static void fill(void)
{
    uint64_t seed = 9;
    for (size_t i = 0; i < NT; i++) {
        tensors[i].data = malloc(tensors[i].nbytes + 1);
        for (size_t k = 0; k < tensors[i].nbytes; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            tensors[i].data[k] = tensors[i].dt == TPS_DT_BOOL ? (unsigned char)(seed >> 63) : (unsigned char)(seed >> 56);
        }
    }
}

/* Writes the tensors through the sink in pieces of `piece` bytes; returns the status. */
static tps_status write_file(const char *path, size_t piece, const tps_kv *meta, size_t nmeta, size_t drop_last, uint32_t *crc,
                             uint64_t *size, tps_error *err)
{
    tps_sink_tensor t[NT];
    size_t total = 0;
    for (size_t i = 0; i < NT; i++) {
        t[i] = (tps_sink_tensor){tensors[i].name, tensors[i].dt, tensors[i].ndim, tensors[i].shape};
        total += tensors[i].nbytes;
    }
    unsigned char *all = malloc(total), *p = all;
    for (size_t i = 0; i < NT; i++) {
        memcpy(p, tensors[i].data, tensors[i].nbytes);
        p += tensors[i].nbytes;
    }
    tps_sink_file *f = NULL;
    tps_status st = tps_torch_sink.open(path, t, NT, meta, nmeta, &f, err);
    total -= drop_last;
    for (size_t at = 0, k = 0; !st && at < total; at += piece, k++) {
        size_t n = total - at < piece ? total - at : piece;
        st = k % 2 ? tps_torch_sink.write_crc(f, all + at, n, tps_crc32(0, all + at, n), err) : tps_torch_sink.write(f, all + at, n, err);
    }
    if (!st) {
        st = tps_torch_sink.commit(f, crc, size, err);
        f = NULL;
    }
    tps_torch_sink.abort(f);
    free(all);
    return st;
}

static size_t dir_entries(void)
{
    DIR *d = opendir(scratch);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static void read_back(const char *path, uint32_t crc, uint64_t size)
{
    tps_error err;
    tps_error_clear(&err);
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    if (!fp) return;
    unsigned char *b = malloc(size + 1);
    size_t got = fread(b, 1, size + 1, fp);
    fclose(fp);
    CHECK_EQ_U64(got, size);
    CHECK_EQ_U64(tps_crc32(0, b, got), crc);
    CHECK(size >= 4 && memcmp(b, "PK\3\4", 4) == 0);
    free(b);
    tps_index *ix = NULL;
    if (tps_torch_open(path, &ix, &err)) {
        printf("#   %s\n", err.msg);
        CHECK(!"the torch reader opens the file");
        return;
    }
    CHECK_EQ_U64(ix->ntensors, NT);
    for (size_t i = 0; i < NT && i < ix->ntensors; i++) {
        const tps_tensor *t = &ix->tensors[i];
        CHECK_STR(t->name, tensors[i].name);
        CHECK_EQ_U64(t->dtype, tensors[i].dt);
        CHECK_EQ_U64(t->ndim, tensors[i].ndim);
        CHECK_EQ_U64(t->nbytes, tensors[i].nbytes);
        unsigned char buf[4096];
        if (t->nbytes && t->nbytes <= sizeof buf && !tps_tensor_read(ix, t, 0, buf, t->nbytes, &err))
            CHECK(memcmp(buf, tensors[i].data, t->nbytes) == 0);
    }
    tps_index_free(ix);
}

TEST(torch_sink_round_trip_through_the_reader)
{
    char path[256];
    snprintf(path, sizeof path, "%s/model_optim_rng.pt", scratch);
    tps_error err;
    tps_error_clear(&err);
    tps_kv meta[] = {{(char *)"tp_rank", (char *)"0"},
                     {(char *)"torch.top", (char *)"{\"iteration\": 3, \"checkpoint_version\": 3.0}"}};
    size_t pieces[] = {1, 7, 64, 100000};
    for (size_t k = 0; k < 4; k++) {
        uint32_t crc = 0, ccrc = 1;
        uint64_t size = 0, csize = 0;
        tps_status st = write_file(path, pieces[k], meta, 2, 0, &crc, &size, &err);
        if (st) printf("#   %s\n", err.msg);
        CHECK(st == TPS_OK);
        read_back(path, crc, size);
        CHECK(write_file(NULL, pieces[k], meta, 2, 0, &ccrc, &csize, &err) == TPS_OK);
        CHECK_EQ_U64(ccrc, crc);
        CHECK_EQ_U64(csize, size);
        unlink(path);
    }
}

TEST(torch_sink_forced_zip64_reads_back)
{
    char path[256];
    snprintf(path, sizeof path, "%s/model_optim_rng.pt", scratch);
    tps_error err;
    tps_error_clear(&err);
    uint32_t crc = 0, plain_crc = 0;
    uint64_t size = 0, plain = 0;
    CHECK(write_file(NULL, 50, NULL, 0, 0, &plain_crc, &plain, &err) == TPS_OK);
    setenv("TPS_TORCH_ZIP64", "1", 1);
    tps_status st = write_file(path, 50, NULL, 0, 0, &crc, &size, &err);
    unsetenv("TPS_TORCH_ZIP64");
    if (st) printf("#   %s\n", err.msg);
    CHECK(st == TPS_OK);
    CHECK(size > plain); /* the ZIP64 extras and 8-byte descriptor sizes */
    read_back(path, crc, size);
    unlink(path);
}

TEST(torch_sink_refusals_leave_no_file)
{
    char path[256];
    snprintf(path, sizeof path, "%s/model_optim_rng.pt", scratch);
    tps_error err;
    uint32_t crc;
    uint64_t size;
    tps_kv bad_key[] = {{(char *)"torch.optimizer", (char *)"{}"}};
    tps_error_clear(&err);
    CHECK(write_file(path, 10, bad_key, 1, 0, &crc, &size, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "torch.optimizer");
    tps_kv bad_global[] = {{(char *)"torch.top", (char *)"{\"x\": {\"$reduce\": [\"posix.system\", [\"id\"]]}}"}};
    tps_error_clear(&err);
    CHECK(write_file(path, 10, bad_global, 1, 0, &crc, &size, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "posix.system");
    tps_error_clear(&err);
    CHECK(write_file(path, 10, NULL, 0, 5, &crc, &size, &err) == TPS_EINVALID); /* 5 bytes short */
    CHECK_CONTAINS(err.msg, "not committed");
    CHECK_EQ_U64(dir_entries(), 0);
    /* one byte more than the tensors hold */
    tps_sink_tensor t = {"x", TPS_DT_U8, 1, (uint64_t[]){3}};
    tps_sink_file *f = NULL;
    tps_error_clear(&err);
    CHECK(tps_torch_sink.open(path, &t, 1, NULL, 0, &f, &err) == TPS_OK);
    CHECK(tps_torch_sink.write(f, "abcd", 4, &err) == TPS_EINVALID);
    tps_torch_sink.abort(f);
    tps_sink_tensor f4 = {"x", TPS_DT_F4, 1, (uint64_t[]){4}};
    tps_error_clear(&err);
    f = NULL;
    CHECK(tps_torch_sink.open(path, &f4, 1, NULL, 0, &f, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "F4");
    CHECK_EQ_U64(dir_entries(), 0);
}

/* A file-size limit makes write() fail with EFBIG, as a full disk fails with ENOSPC: an
 * I/O error naming the file, commit refuses, nothing is left. */
TEST(torch_sink_reports_write_failure)
{
    char path[256];
    snprintf(path, sizeof path, "%s/model_optim_rng.pt", scratch);
    tps_fsize_guard g;
    bool limited = tps_fsize_limit(&g, 100000);
    CHECK(limited);
    if (!limited) return;
    tps_sink_tensor t = {"big", TPS_DT_U8, 1, (uint64_t[]){3u << 20}};
    tps_error err, e2;
    tps_error_clear(&err);
    tps_error_clear(&e2);
    tps_sink_file *f = NULL;
    CHECK(tps_torch_sink.open(path, &t, 1, NULL, 0, &f, &err) == TPS_OK);
    unsigned char *buf = calloc(1, 1u << 20);
    tps_status st = TPS_OK;
    for (int i = 0; f && buf && i < 3 && st == TPS_OK; i++) st = tps_torch_sink.write(f, buf, 1u << 20, &err);
    CHECK(st == TPS_EIO);
    CHECK_CONTAINS(err.msg, "model_optim_rng.pt");
    if (f) CHECK(tps_torch_sink.commit(f, NULL, NULL, &e2) == TPS_EIO);
    tps_fsize_restore(&g);
    CHECK_EQ_U64(dir_entries(), 0);
    free(buf);
}

TEST(pickle_write_allow_list)
{
    CHECK(tps_pickle_write_allowed("argparse.Namespace"));
    CHECK(tps_pickle_write_allowed("megatron.core.enums.ModelType"));
    CHECK(tps_pickle_write_allowed("_codecs.encode"));
    CHECK(!tps_pickle_write_allowed("os.system"));
    CHECK(!tps_pickle_write_allowed("builtins.eval"));
    CHECK(!tps_pickle_write_allowed("torch._utils._rebuild_tensor_v2")); /* only inside the state dict */
}

int main(void)
{
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        return 1;
    }
    fill();
    RUN(torch_sink_round_trip_through_the_reader);
    RUN(torch_sink_forced_zip64_reads_back);
    RUN(torch_sink_refusals_leave_no_file);
    RUN(torch_sink_reports_write_failure);
    RUN(pickle_write_allow_list);
    rmdir(scratch);
    for (size_t i = 0; i < NT; i++) free(tensors[i].data);
    return tps_test_done();
}
