#include "output_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lib/registry.h"
#include "lib/targets.h"

#include "cli.h"
#include "formats/safetensors.h"

tps_write_opts tps_cli_write_opts(const char *out, bool force, const char *const *inputs, const char *only_ranks,
                                  const char *name_template, uint64_t max_part_bytes, tps_progress_state *ps)
{
    return (tps_write_opts){.out = out,
                            .kind = TPS_OUT_SHARDSET,
                            .force = force,
                            .inputs = inputs,
                            .only_ranks = only_ranks,
                            .cut = {.sink = &tps_safetensors_sink,
                                    .name_template = name_template,
                                    .progress = tps_progress_update,
                                    .progress_arg = ps,
                                    .max_part_bytes = max_part_bytes,
                                    .file_done = tps_progress_file_done,
                                    .file_done_arg = ps}};
}

/* tps_write_set as a tps_cli_writer_fn. */
typedef struct set_writer {
    tps_manifest *m;
    tps_global_read_fn read;
    void *ctx;
} set_writer;

static tps_status write_set(void *arg, const tps_write_opts *o, tps_error *err)
{
    const set_writer *w = arg;
    return tps_write_set(w->m, w->read, w->ctx, o, err);
}

int tps_cli_write(const char *verb, tps_manifest *m, tps_global_read_fn read, void *ctx, const tps_write_opts *o)
{
    set_writer w = {m, read, ctx};
    return tps_cli_write_with(verb, write_set, &w, o);
}

int tps_cli_write_with(const char *verb, tps_cli_writer_fn write, void *arg, const tps_write_opts *o)
{
    tps_error err;
    tps_error_clear(&err);
    tps_progress_state *ps = o->cut.progress_arg;
    tps_progress_begin(ps, verb);
    write(arg, o, &err);
    tps_progress_end(ps);
    return tps_cli_report(verb, &err);
}

int tps_cli_apply_target(const char *verb, const char *name, const char *version, tps_manifest *m)
{
    tps_error err;
    tps_error_clear(&err);
    const tps_target_entry *e = tps_target_lookup(name, TPS_TARGET_SET, &err);
    if (!e) return tps_cli_report(verb, &err);
    if (version && !(e->caps & TPS_TARGET_RELEASES)) return tps_cli_usage_version(verb);
    if (version) { /* "current" is the default: the newest release class */
        free(m->target_version);
        m->target_version = NULL;
        if (strcmp(version, "current") != 0 && !(m->target_version = strdup(version))) {
            tps_fail_oom(&err, "reading --target-version");
            return tps_cli_report(verb, &err);
        }
    }
    tps_target *t = NULL;
    size_t had = m->nskipped; /* the target's skip: entries add to the layout's */
    if (!e->schema) tps_target_clear(m, &err); /* back to the source's names */
    else if (tps_target_load(m->layout_text, m->layout_name, e->schema, &t, &err) == TPS_OK) tps_target_apply(t, m, &err);
    tps_target_free(t);
    for (size_t i = had; err.code == TPS_OK && !tps_common.quiet && i < m->nskipped; i++)
        fprintf(stderr, "tpshard %s: --target %s: skipped %llu tensor%s: %s (%s)\n", verb, name,
                (unsigned long long)m->skipped[i].count, m->skipped[i].count == 1 ? "" : "s", m->skipped[i].glob,
                m->skipped[i].reason);
    return tps_cli_report(verb, &err);
}

int tps_cli_usage_version(const char *verb)
{
    char names[128];
    return tps_cli_usage(verb, "--target-version needs --target %s (an engine's release)",
                         tps_target_names(TPS_TARGET_RELEASES, names, sizeof names));
}

void tps_cli_target_write_opts(tps_write_opts *wo, const char *target, const char *src, uint64_t max_part_bytes,
                               char **side)
{
    struct stat sb;
    *side = NULL;
    if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        *side = strdup(src);
    } else {
        const char *slash = strrchr(src, '/');
        *side = slash ? strndup(src, (size_t)(slash - src + (slash == src))) : strdup(".");
    }
    wo->side_files = *side;
    wo->cut.max_part_bytes = max_part_bytes ? max_part_bytes : 5ull << 30;
    const tps_target_entry *e = tps_target_find(target);
    if (!wo->cut.name_template) wo->cut.name_template = e ? e->files : TPS_DEFAULT_PART_TEMPLATE;
}
