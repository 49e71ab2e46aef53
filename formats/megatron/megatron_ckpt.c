#include "megatron_ckpt.h"

#include <stdlib.h>
#include <string.h>

tps_status tps_megatron_file_add_extra(tps_megatron_file *mf, const char *name, tps_error *err)
{
    char **grown = realloc(mf->extra_state, (mf->n_extra_state + 1) * sizeof *grown);
    if (!grown) return tps_fail_oom(err, "reading a Megatron checkpoint");
    mf->extra_state = grown;
    if (!(mf->extra_state[mf->n_extra_state] = strdup(name))) return tps_fail_oom(err, "reading a Megatron checkpoint");
    mf->n_extra_state++;
    return TPS_OK;
}

void tps_megatron_close(tps_megatron_ckpt *c)
{
    if (!c) return;
    for (size_t i = 0; c->files && i < (size_t)c->tp * c->pp; i++) {
        tps_megatron_file *f = &c->files[i];
        free(f->path);
        tps_index_free(f->ix);
        for (size_t k = 0; k < f->n_extra_state; k++) free(f->extra_state[k]);
        free(f->extra_state);
    }
    free(c->files);
    free(c->root);
    free(c->iter_dir);
    free(c->checkpoint_version_json);
    free(c->args_json);
    free(c);
}
