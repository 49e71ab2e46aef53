/* tpshard check: prove a shard set intact from its manifest, in one read of the shards. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "commands.h"
#include "formats/open.h"
#include "formats/megatron.h"
#include "formats/torch.h"
#include "junit_report.h"
#include "lib/base.h"
#include "lib/engine.h"
#include "lib/set.h"
#include "lib/targets.h"
#include "progress.h"

static struct {
    const char *source;
} o;

static const tps_opt check_opts[] = {
    {"source", 0, TPS_OPT_STRING, &o.source, "SRC", "also compare every tensor with this checkpoint, bit for bit"},
    {"json", 0, TPS_OPT_FLAG, &tps_common.json, NULL, "machine-readable result"},
    {"junit", 0, TPS_OPT_STRING, &tps_junit_path, "FILE", "also write a JUnit XML report: a case per rank file"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

/* The progress line around each pass over the set's bytes (tps_check_opts.phase). */
static void progress_phase(void *arg, bool begin)
{
    if (begin) tps_progress_begin(arg, "check");
    else tps_progress_end(arg);
}

/* The footer: what was covered, whatever the verdict ("ranks 0-1 of 8 (partial set): 2
 * files, ..."), so a pass that covered little is seen as such. */
static void print_footer(FILE *out, const tps_manifest *m, const tps_check_coverage *cov, size_t nfindings)
{
    char held[256];
    tps_manifest_held_str(m, held, sizeof held);
    fprintf(out, "checked: ranks %s of %llu%s: %llu file%s, %llu bytes, %llu tensor%s; findings: %zu\n", held,
            (unsigned long long)m->tp, tps_manifest_holds_all(m) ? "" : " (partial set)",
            (unsigned long long)cov->files, cov->files == 1 ? "" : "s", (unsigned long long)cov->bytes,
            (unsigned long long)cov->tensors, cov->tensors == 1 ? "" : "s", nfindings);
}

static void print_result(const char *dir, const tps_manifest *m, const tps_check_findings *f,
                         const tps_check_coverage *cov)
{
    if (tps_common.json) {
        tps_buf b = TPS_BUF_INIT;
        tps_check_json(&b, dir, m, f, cov);
        if (tps_buf_cstr(&b)) printf("%s\n", b.data);
        tps_buf_release(&b);
        return;
    }
    for (size_t i = 0; i < f->n; i++) fprintf(stderr, "tpshard check: %s\n", f->msg[i]);
    if (f->n) {
        fprintf(stderr, "tpshard check: %s: %zu finding%s\n", dir, f->n, f->n == 1 ? "" : "s");
        if (m) print_footer(stderr, m, cov, f->n);
        return;
    }
    if (tps_common.quiet) return;
    /* A set tpshard did not write records no checksums: say what was proved instead. */
    if (tps_manifest_holds_all(m) && m->adopted)
        printf("%s: ok: tp %llu, %zu tensors, %zu files, every element covered once, replicas equal, key sets and "
               "shapes as planned%s (the set records no checksums of its own: none compared)\n",
               dir, (unsigned long long)m->tp, m->ntensors, m->nfiles,
               cov->zip_records ? ", every zip record's CRC-32 matches" : "");
    else if (tps_manifest_holds_all(m))
        printf("%s: ok: tp %llu, %zu tensors, %zu files, every element covered once, replicas equal, checksums match\n",
               dir, (unsigned long long)m->tp, m->ntensors, m->nfiles);
    else {
        char held[256];
        tps_manifest_held_str(m, held, sizeof held);
        printf("%s: ok: ranks %s of %llu (partial set): every file's size and checksum match; the global tensors' "
               "checksums need every rank (the other nodes check theirs)\n",
               dir, held, (unsigned long long)m->tp);
    }
    print_footer(stdout, m, cov, 0);
}

static int run_check(char **args, int nargs)
{
    (void)nargs;
    const char *dir = args[0];
    tps_error err;
    tps_error_clear(&err);
    tps_check_findings f = {.fail_alloc = getenv("TPSHARD_TEST_FINDING_OOM") != NULL};
    tps_check_coverage cov = {0};
    tps_shardset *ss = NULL;
    tps_index *src = NULL;
    tps_progress_state ps;
    int rc = 0;
    if (!tps_is_shard_set(dir) && !tps_adopt_is_engine_set(dir) && !tps_megatron_is_checkpoint(dir)) {
        tps_cli_errorf("check", "%s: not a shard set (no %s)", dir, TPS_MANIFEST_NAME);
        return TPS_EXIT_INVALID;
    }
    if (tps_shardset_open(dir, &ss, &err)) {
        tps_check_findingf(&f, "%s", err.msg); /* a manifest that does not hold up is a finding */
        goto report;
    }
    bool ranks_ok = tps_check_open_ranks(ss, &f, &cov);
    if (o.source && !tps_manifest_holds_all(ss->m)) {
        rc = tps_cli_usage("check", "--source compares the reassembled tensors, which a partial set (ranks of "
                                    "one node) cannot give: check the whole set");
        goto cleanup;
    }
    if (o.source && tps_checkpoint_open(o.source, &src, &err)) {
        rc = tps_cli_report("check", &err);
        goto cleanup;
    }
    tps_check_opts co = {.src = src, .verify_records = tps_torch_verify_records, .phase = progress_phase,
                         .progress = tps_progress_update, .progress_arg = &ps};
    if (tps_check_run(ss, ranks_ok, &co, &f, &cov, &err)) {
        rc = tps_cli_report("check", &err);
        goto cleanup;
    }
report:
    if (f.oom) {
        /* Some finding is missing from the list: neither a pass nor a complete report. */
        for (size_t i = 0; i < f.n; i++) fprintf(stderr, "tpshard check: %s\n", f.msg[i]);
        tps_fail_oom(&err, "recording a finding");
        rc = tps_cli_report("check", &err);
        goto cleanup;
    }
    if (!f.n && ss && cov.files == 0 && cov.tensors == 0)
        tps_check_findingf(&f, "nothing was checked: no file and no tensor was compared with the manifest");
    print_result(dir, ss ? ss->m : NULL, &f, &cov);
    tps_cli_junit_check(dir, ss ? ss->m : NULL, f.msg, f.n);
    rc = f.n ? TPS_EXIT_MISMATCH : 0;
cleanup:
    tps_check_findings_free(&f);
    tps_index_free(src);
    tps_shardset_free(ss);
    return rc;
}

const tps_cmd tps_cmd_check = {
    .name = "check",
    .summary = "prove a shard set intact: files, coverage, replicas, checksums",
    .usage = "check DIR [--source SRC] [--json] [--junit FILE]",
    .details = "Reads every shard byte once.  Exit 0 when intact; exit 1 listing every finding.  Ends with\n"
               "what it covered (ranks, files, bytes, tensors).  A partial set (written with --only-rank)\n"
               "is checked for the ranks it holds: each file's size and CRC-32.\n",
    .opts = check_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_check,
};
