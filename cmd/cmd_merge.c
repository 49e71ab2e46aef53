/* tpshard merge: put a shard set back together, bit-exact, padding stripped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "progress.h"
#include "formats/safetensors.h"
#include "lib/gather.h"
#include "lib/hf_index.h"
#include "lib/outdir.h"
#include "lib/publish.h"

static struct {
    uint64_t max_shard;
    const char *out;
    bool force;
} o;

static const tps_opt merge_opts[] = {
    {"output", 'o', TPS_OPT_STRING, &o.out, "FILE|DIR",
     "FILE.safetensors for one file, or a directory for a Hugging Face multi-file set"},
    {"max-shard-size", 0, TPS_OPT_SIZE, &o.max_shard, "SIZE", "largest file of a directory output (default 5GB)"},
    {"force", 'f', TPS_OPT_FLAG, &o.force, NULL, "replace an existing output"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

typedef struct merge_sink {
    tps_st_writer *w;
    size_t nfindings;
    tps_progress prog; /* done: bytes of the tensors before the current one */
    tps_progress_state ps;
} merge_sink;

static tps_status to_writer(void *arg, uint64_t off, const void *p, size_t n, tps_error *err)
{
    merge_sink *s = arg;
    tps_progress now = {s->prog.done + off + n, s->prog.total, s->prog.tensor};
    tps_progress_update(&now, &s->ps);
    return tps_st_writer_write(s->w, p, n, err);
}

static void on_finding(void *arg, const char *msg)
{
    merge_sink *s = arg;
    tps_progress_end(&s->ps);
    tps_cli_errorf("merge", "%s", msg);
    s->nfindings++;
}

/* Writes tensors [first, last) of the manifest, whole, into one safetensors file. */
static tps_status write_part(tps_shardset *ss, size_t first, size_t last, const char *path, merge_sink *sink,
                             tps_error *err)
{
    const tps_manifest *m = ss->m;
    tps_st_entry *e = calloc(last - first + 1, sizeof *e);
    if (!e) return tps_fail_oom(err, "merging");
    for (size_t i = first; i < last; i++)
        e[i - first] = (tps_st_entry){m->tensors[i].name, m->tensors[i].dtype, m->tensors[i].ndim, m->tensors[i].shape};
    tps_status st = tps_st_writer_open(path, e, last - first, NULL, 0, &sink->w, err);
    free(e);
    if (st) return st;
    tps_gather_hooks h = {to_writer, on_finding, sink, false};
    for (size_t i = first; i < last && st == TPS_OK; i++) {
        uint32_t crc;
        sink->prog.tensor = m->tensors[i].name;
        st = tps_gather_tensor(ss, &m->tensors[i], &h, &crc, NULL, err);
        sink->prog.done += m->tensors[i].nbytes;
        if (st == TPS_OK && crc != m->tensors[i].crc) {
            tps_progress_end(&sink->ps);
            tps_cli_errorf("merge", "tensor '%s': CRC-32 %08x, the manifest says %08x", m->tensors[i].name,
                           (unsigned)crc, m->tensors[i].crc);
            sink->nfindings++;
        }
        if (st == TPS_OK && tps_outdir_interrupted())
            st = tps_fail(err, TPS_EINTERRUPTED, "interrupted by signal %d", tps_outdir_interrupted());
    }
    if (st == TPS_OK && sink->nfindings)
        st = tps_fail(err, TPS_EMISMATCH, "the shard set is inconsistent; nothing was written");
    if (st) {
        tps_st_writer_abort(sink->w);
    } else {
        uint64_t size = 0;
        st = tps_st_writer_commit(sink->w, NULL, &size, err);
        const char *base = strrchr(path, '/');
        if (st == TPS_OK) tps_progress_file_done(base ? base + 1 : path, size, &sink->ps);
    }
    sink->w = NULL;
    return st;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A Hugging Face multi-file set: tensors in manifest order, a new file whenever the next
 * tensor would pass max bytes (a tensor larger than max gets a file of its own). */
static tps_status merge_to_dir(tps_shardset *ss, const char *dir, merge_sink *sink, tps_error *err)
{
    const tps_manifest *m = ss->m;
    uint64_t max = o.max_shard ? o.max_shard : 5000000000ull;
    size_t nparts = 0, *start = calloc(m->ntensors + 2, sizeof *start);
    uint64_t *bytes = calloc(m->ntensors + 1, sizeof *bytes);
    char(*names)[64] = calloc(m->ntensors + 1, sizeof *names);
    if (!start || !bytes || !names) {
        free(start);
        free(bytes);
        free(names);
        return tps_fail_oom(err, "merging");
    }
    uint64_t total = 0;
    for (size_t i = 0; i < m->ntensors; i++) total += bytes[i] = m->tensors[i].nbytes;
    tps_parts_greedy(bytes, m->ntensors, max, start, &nparts);
    const char *inputs[] = {ss->dir, NULL};
    tps_outdir *od = NULL;
    tps_status st = tps_outdir_begin(dir, o.force, inputs, &od, err);
    const char **part_names = calloc(nparts, sizeof *part_names);
    if (st == TPS_OK && !part_names) st = tps_fail_oom(err, "merging");
    for (size_t p = 0; st == TPS_OK && p < nparts; p++) {
        if (nparts == 1) snprintf(names[p], sizeof names[p], "model.safetensors");
        else snprintf(names[p], sizeof names[p], "model-%05zu-of-%05zu.safetensors", p + 1, nparts);
        part_names[p] = names[p];
        char *path = tps_outdir_path(od, names[p]);
        st = path ? write_part(ss, start[p], start[p + 1], path, sink, err) : tps_fail_oom(err, "merging");
        free(path);
    }
    if (st == TPS_OK && nparts > 1)
        st = tps_hf_index_write(od, "model.safetensors.index.json", m, start, nparts, part_names, total, err);
    if (st == TPS_OK) st = tps_outdir_commit(od, err);
    if (st) tps_outdir_abort(od);
    else tps_outdir_free(od);
    free(part_names);
    free(names);
    free(bytes);
    free(start);
    return st;
}

static int run_merge(char **args, int nargs)
{
    (void)nargs;
    if (!o.out) return tps_cli_usage("merge", "-o FILE|DIR is required");
    tps_error err;
    tps_error_clear(&err);
    tps_shardset *ss = NULL;
    merge_sink sink = {0};
    if (tps_shardset_open(args[0], &ss, &err)) return tps_cli_report("merge", &err);
    tps_signals_install();
    for (size_t i = 0; i < ss->m->ntensors; i++) sink.prog.total += ss->m->tensors[i].nbytes;
    tps_progress_begin(&sink.ps, "merge");
    tps_status st;
    struct stat sb;
    bool exists = stat(o.out, &sb) == 0;
    if (ends_with(o.out, ".safetensors") && !(exists && S_ISDIR(sb.st_mode))) {
        if (exists && !o.force) st = tps_fail(&err, TPS_EINVALID, "%s: exists (use --force to replace it)", o.out);
        else st = write_part(ss, 0, ss->m->ntensors, o.out, &sink, &err);
    } else {
        st = merge_to_dir(ss, o.out, &sink, &err);
    }
    tps_progress_end(&sink.ps);
    int rc = tps_cli_report("merge", &err);
    if (st == TPS_OK && !tps_common.quiet)
        printf("merged %s (tp %llu, %zu tensors) into %s\n", args[0], (unsigned long long)ss->m->tp, ss->m->ntensors,
               o.out);
    tps_shardset_free(ss);
    return rc;
}

const tps_cmd tps_cmd_merge = {
    .name = "merge",
    .summary = "reassemble the full checkpoint from a shard set, bit-exact",
    .usage = "merge DIR -o FILE.safetensors|DIR [--max-shard-size SIZE]",
    .details = "Padding is stripped.  Replicas are compared; a mismatch is exit 1 naming the tensor\n"
               "and the ranks, and nothing is written.\n",
    .opts = merge_opts,
    .min_args = 1,
    .max_args = 1,
    .run = run_merge,
};
