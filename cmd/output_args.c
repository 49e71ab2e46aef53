#include "output_args.h"

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

int tps_cli_write(const char *verb, tps_manifest *m, tps_global_read_fn read, void *ctx, const tps_write_opts *o)
{
    tps_error err;
    tps_error_clear(&err);
    tps_progress_state *ps = o->cut.progress_arg;
    tps_progress_begin(ps, verb);
    tps_write_set(m, read, ctx, o, &err);
    tps_progress_end(ps);
    return tps_cli_report(verb, &err);
}
