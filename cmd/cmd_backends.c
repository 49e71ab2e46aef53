/* tpshard backends: each verify backend, whether it can run on this machine, and on what or
 * why not (verify/backends/backend.h's probe). */
#include <stdio.h>

#include "cli.h"
#include "commands.h"
#include "help.h"
#include "lib/base.h"
#include "verify/verify.h"

static const tps_opt backends_opts[] = {
    {"json", 0, TPS_OPT_FLAG, &tps_common.json, NULL, "machine-readable list"},
    TPS_COMMON_OPTS,
    TPS_OPTS_END,
};

static void print_json(const tps_vbackend_probe *p)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, true);
    tps_jw_array_begin(&w);
    for (int i = 0; i < TPS_VBACKEND_PROBES; i++) {
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "backend");
        tps_jw_string(&w, p[i].name);
        tps_jw_key(&w, "usable");
        tps_jw_bool(&w, p[i].usable);
        tps_jw_key(&w, "detail");
        tps_jw_string(&w, p[i].detail);
        tps_jw_object_end(&w);
    }
    tps_jw_array_end(&w);
    printf("%s\n", tps_buf_cstr(&b) ? b.data : "[]");
    tps_buf_release(&b);
}

static int run_backends(char **args, int nargs)
{
    (void)args;
    (void)nargs;
    tps_vbackend_probe p[TPS_VBACKEND_PROBES];
    tps_vbackend_probe_all(p);
    if (tps_common.json) {
        print_json(p);
        return 0;
    }
    for (int i = 0; i < TPS_VBACKEND_PROBES; i++) {
        printf("%-7s %-3s ", p[i].name, p[i].usable ? "yes" : "no");
        tps_cli_wrap(stdout, 12, 12, p[i].detail);
    }
    return 0;
}

const tps_cmd tps_cmd_backends = {
    .name = "backends",
    .summary = "which verify backends can run here, on what, or why not",
    .usage = "backends [--json]",
    .details = "cpu: the rank threads, the BLAS they found (or the plain loops) and the float64\n"
               "reference's kernel.  devsim, cuda: their plugin opened and its devices counted\n"
               "(without a GPU, what the cuda plugin found and that there is no device).  mpi:\n"
               "its plugin loaded; MPI itself starts under mpirun.  Exit 0 whatever it finds.\n",
    .opts = backends_opts,
    .min_args = 0,
    .max_args = 0,
    .run = run_backends,
};
