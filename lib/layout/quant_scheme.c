/* Building a companion scheme (lib/layout/quant_scheme.h). */
#include "quant_scheme.h"

#include <stdio.h>
#include <string.h>

void tps_quant_add_companion(tps_quant_scheme *s, const char *suffix, int ndim, int w0, uint64_t r0, int w1,
                             uint64_t r1, bool primary, bool replicate_in)
{
    tps_quant_companion *c = &s->comp[s->ncomp++];
    memset(c, 0, sizeof *c);
    snprintf(c->suffix, sizeof c->suffix, "%s", suffix);
    c->ndim = ndim;
    c->wdim[0] = w0;
    c->wdim[1] = w1;
    c->ratio[0] = r0;
    c->ratio[1] = r1;
    c->primary = primary;
    c->replicate_in = replicate_in;
}
