/* Pipeline stages (lib/set/grid_stages.h). */
#include "grid_stages.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

tps_status tps_grid_layers_parse(uint64_t num_layers, uint64_t pp, const char *pp_layers, uint64_t *first,
                                 tps_error *err)
{
    const char *s = pp_layers;
    first[0] = 0;
    for (uint64_t p = 0; p < pp; p++) {
        char *end;
        errno = 0;
        if (*s < '1' || *s > '9')
            return tps_fail(err, TPS_EARG, "--pp-layers '%s': %" PRIu64 " positive layer counts separated by commas",
                            pp_layers, pp);
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || v > num_layers || (p + 1 < pp ? *end != ',' : *end != '\0'))
            return tps_fail(err, TPS_EARG, "--pp-layers '%s': %" PRIu64 " positive layer counts separated by commas",
                            pp_layers, pp);
        first[p + 1] = first[p] + v;
        s = end + 1;
    }
    if (first[pp] != num_layers)
        return tps_fail(err, TPS_EARG, "--pp-layers '%s' adds up to %" PRIu64 " layers, the model has %" PRIu64,
                        pp_layers, first[pp], num_layers);
    return TPS_OK;
}

void tps_grid_vllm_stages(uint64_t num_layers, uint64_t pp, uint64_t *first)
{
    uint64_t rem = num_layers % pp;
    first[0] = 0;
    for (uint64_t p = 0; p < pp; p++) {
        /* partitions[-i] += 1 for i in 2 .. rem+1: stages pp-1-rem .. pp-2 get one more */
        uint64_t extra = p + 1 < pp && p + 1 + rem >= pp ? 1 : 0;
        first[p + 1] = first[p] + num_layers / pp + extra;
    }
}

bool tps_grid_layer_of(const char *name, uint64_t *layer)
{
    for (const char *p = name; (p = strstr(p, "layers.")) != NULL; p++) {
        if (p != name && p[-1] != '.') continue;
        const char *d = p + strlen("layers.");
        if (*d < '0' || *d > '9') continue;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(d, &end, 10);
        if (errno || (*end != '.' && *end != '\0')) continue;
        *layer = v;
        return true;
    }
    return false;
}

uint64_t tps_grid_stage_of(uint64_t pp, const uint64_t *first, const char *name)
{
    if (pp <= 1) return 0;
    uint64_t n;
    if (!tps_grid_layer_of(name, &n)) return strstr(name, "embed") ? 0 : pp - 1;
    for (uint64_t p = 0; p < pp; p++)
        if (n < first[p + 1]) return p;
    return pp - 1; /* past the last layer: refused where the stages are made */
}
