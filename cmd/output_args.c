#include "output_args.h"

#include <string.h>

#include "cli.h"
#include "lib/cut.h"

int tps_cli_name_template(const char *cmd, const char *user, uint64_t tp, uint64_t max_part_bytes,
                          const char **out)
{
    const char *tmpl = user ? user : max_part_bytes ? TPS_DEFAULT_PART_TEMPLATE : TPS_DEFAULT_NAME_TEMPLATE;
    if (max_part_bytes && !strstr(tmpl, "{part}"))
        return tps_cli_usage(cmd, "--max-shard-size needs {part} in the name template, and '%s' has none (e.g. %s)",
                             tmpl, TPS_DEFAULT_PART_TEMPLATE);
    char probe[1024];
    tps_error err;
    tps_error_clear(&err);
    if (tp && tps_format_name(tmpl, 0, tp, 0, probe, sizeof probe, &err))
        return tps_cli_usage(cmd, "--name-template: %s", err.msg);
    *out = tmpl;
    return -1;
}

tps_cut_opts tps_cli_cut_opts(const bool *write_rank, const char *tmpl, uint64_t max_part_bytes,
                              tps_progress_state *ps)
{
    return (tps_cut_opts){.write_rank = write_rank,
                          .name_template = tmpl,
                          .progress = tps_progress_update,
                          .progress_arg = ps,
                          .max_part_bytes = max_part_bytes,
                          .file_done = tps_progress_file_done,
                          .file_done_arg = ps};
}
