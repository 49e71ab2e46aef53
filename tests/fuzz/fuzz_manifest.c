/* The shard-set manifest loader (lib/manifest.h: tps_manifest_parse, the same checks
 * tps_manifest_load makes on DIR/tpshard.json), then a re-emit of what it accepted. */
#include "fuzz.h"

#include "lib/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tps_manifest *m = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_manifest_parse((const char *)data, size, "fuzz/tpshard.json", &m, &err) == TPS_OK) {
        tps_buf b = TPS_BUF_INIT;
        tps_manifest_to_json(m, &b, &err);
        if (m->ntensors) tps_manifest_find(m, m->tensors[m->ntensors - 1].name);
        tps_buf_release(&b);
    }
    tps_manifest_free(m);
    return 0;
}
