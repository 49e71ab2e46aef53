/* Megatron checkpoint directories (formats/megatron/megatron_read.h): the tracker's rules
 * (Megatron's read_metadata), the rank grid, and the names refused, on hand-made
 * directories.  Reading real rank files is tested against torch in
 * tests/interop/megatron/debian/test_megatron_read.py, which runs
 *   test_formats_megatron_read --dump DIR
 * to print what the reader indexed: per rank file "file TP PP", then "tensor NAME DTYPE
 * SHAPE HEX" (C-order little-endian bytes) and "extra NAME" lines, then "args JSON",
 * "version JSON", "iteration N", "legacy 0|1". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/megatron/megatron_read.h"
#include "tps_test.h"

static char scratch[256];

static void put(const char *rel, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", scratch, rel);
    FILE *f = fopen(p, "w");
    if (!f) {
        perror(p);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
}

static void dir(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", scratch, rel);
    mkdir(p, 0755);
}

static void fresh(void)
{
    char cmd[300];
    if (*scratch) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
        if (system(cmd) != 0) exit(2);
    }
    snprintf(scratch, sizeof scratch, "/tmp/tps_mgread_XXXXXX");
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        exit(2);
    }
}

static void expect_refused(const char *rel, const char *fragment)
{
    char p[512];
    snprintf(p, sizeof p, "%s%s%s", scratch, *rel ? "/" : "", rel);
    tps_error err;
    tps_error_clear(&err);
    tps_megatron_ckpt *c = NULL;
    CHECK_EQ_U64(tps_megatron_open(p, &c, &err), TPS_EINVALID);
    CHECK(c == NULL);
    CHECK_CONTAINS(err.msg, fragment);
    tps_megatron_close(c);
}

TEST(tracker_rules)
{
    fresh();
    put("latest_checkpointed_iteration.txt", "0");
    expect_refused("", "iteration 0; Megatron loads only iterations > 0");
    put("latest_checkpointed_iteration.txt", "-4\n");
    expect_refused("", "iteration -4");
    put("latest_checkpointed_iteration.txt", "latest");
    expect_refused("", "'latest' is neither an iteration number nor 'release'");
    put("latest_checkpointed_iteration.txt", " 12\n");
    expect_refused("", "names iter_0000012, but");
    put("latest_checkpointed_iteration.txt", "release");
    expect_refused("", "names release, but");
    dir("release");
    expect_refused("", "no mp_rank_* directories");
    dir("release/mp_rank_00");
    expect_refused("", "release/mp_rank_00/model_optim_rng.pt is missing");
    expect_refused("/", "release/mp_rank_00/model_optim_rng.pt is missing"); /* the root with a trailing slash */
    expect_refused("release/", "release/mp_rank_00/model_optim_rng.pt is missing");
}

TEST(rank_grid_rules)
{
    fresh();
    dir("iter_0000003");
    put("latest_checkpointed_iteration.txt", "3");
    dir("iter_0000003/mp_rank_00_000");
    dir("iter_0000003/mp_rank_01_001");
    dir("iter_0000003/mp_rank_00_001");
    expect_refused("", "iter_0000003/mp_rank_01_000 is missing: the rank directories found span tp 2 x pp 2");
    expect_refused("iter_0000003", "mp_rank_01_000 is missing");
    dir("iter_0000003/mp_rank_01");
    expect_refused("", "mixes mp_rank_XX and mp_rank_XX_YYY");
    fresh();
    dir("iter_0000003");
    dir("iter_0000003/mp_rank_00_000_001");
    expect_refused("iter_0000003", "an expert-parallel rank directory (mp_rank_TP_PP_EP)");
    fresh();
    dir("iter_0000003");
    dir("iter_0000003/mp_rank_00");
    dir("iter_0000003/mp_rank_02");
    expect_refused("iter_0000003", "mp_rank_01 is missing: the rank directories found span tp 3");
    fresh();
    dir("iter_0000003");
    dir("iter_0000003/mp_rank_00");
    put("iter_0000003/metadata.json", "{}"); /* a distributed checkpoint's marks, without its backend */
    put("iter_0000003/common.pt", "");
    expect_refused("iter_0000003", "metadata.json: no \"sharded_backend\" string");
}

TEST(is_checkpoint)
{
    fresh();
    char p[512];
    CHECK(!tps_megatron_is_checkpoint(scratch));
    dir("iter_0000001");
    dir("iter_0000001/mp_rank_00");
    snprintf(p, sizeof p, "%s/iter_0000001", scratch);
    CHECK(tps_megatron_is_checkpoint(p));
    CHECK(!tps_megatron_is_checkpoint(scratch));
    put("latest_checkpointed_iteration.txt", "1");
    CHECK(tps_megatron_is_checkpoint(scratch));
    snprintf(p, sizeof p, "%s/latest_checkpointed_iteration.txt", scratch);
    CHECK(!tps_megatron_is_checkpoint(p)); /* a file, not a directory */
    dir("mp_rank_xx");
    dir("other");
    snprintf(p, sizeof p, "%s/other", scratch);
    CHECK(!tps_megatron_is_checkpoint(p));
}

static int dump(const char *path)
{
    tps_error err;
    tps_error_clear(&err);
    tps_megatron_ckpt *c = NULL;
    if (tps_megatron_open(path, &c, &err) != TPS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 3;
    }
    for (size_t i = 0; i < (size_t)c->tp * c->pp; i++) {
        const tps_megatron_file *f = &c->files[i];
        printf("file %u %u\n", f->tp_rank, f->pp_rank);
        for (size_t k = 0; k < f->ix->ntensors; k++) {
            const tps_tensor *t = &f->ix->tensors[k];
            unsigned char *b = malloc(t->nbytes + 1);
            if (!b || tps_tensor_read(f->ix, t, 0, b, t->nbytes, &err) != TPS_OK) {
                fprintf(stderr, "%s\n", b ? err.msg : "out of memory");
                return 4;
            }
            printf("tensor %s %s ", t->name, tps_dtype_name(t->dtype));
            for (int d = 0; d < t->ndim; d++) printf("%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
            printf(" ");
            for (uint64_t j = 0; j < t->nbytes; j++) printf("%02x", b[j]);
            printf("\n");
            free(b);
        }
        for (size_t k = 0; k < f->n_extra_state; k++) printf("extra %s\n", f->extra_state[k]);
    }
    printf("args %s\nversion %s\niteration %lld\nlegacy %d\ngrid %u %u\ndir %s %s %d\n", c->args_json,
           c->checkpoint_version_json, (long long)c->iteration, c->legacy_names, c->tp, c->pp, c->root, c->iter_dir,
           c->release);
    tps_megatron_close(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump(argv[2]);
    RUN(tracker_rules);
    RUN(rank_grid_rules);
    RUN(is_checkpoint);
    fresh(); /* removes the last scratch directory */
    rmdir(scratch);
    return tps_test_done();
}
