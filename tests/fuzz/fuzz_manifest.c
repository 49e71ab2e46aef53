/* The shard-set manifest loader (lib/set/manifest.h: tps_manifest_parse, the same checks
 * tps_manifest_load makes on DIR/tpshard.json), then a re-emit of what it accepted, which
 * must load again and emit the same text (reshard writes manifests from loaded ones). */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/set/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tps_manifest *m = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_manifest_parse((const char *)data, size, "fuzz/tpshard.json", &m, &err) == TPS_OK) {
        tps_buf b = TPS_BUF_INIT, again = TPS_BUF_INIT;
        tps_manifest *m2 = NULL;
        if (tps_manifest_to_json(m, &b, &err) == TPS_OK && tps_buf_cstr(&b)) {
            if (tps_manifest_parse(b.data, b.len, "fuzz/re-emitted", &m2, &err) != TPS_OK) {
                fprintf(stderr, "a re-emitted manifest does not load: %s\n", err.msg);
                abort();
            }
            if (tps_manifest_to_json(m2, &again, &err) != TPS_OK || !tps_buf_cstr(&again) ||
                again.len != b.len || memcmp(again.data, b.data, b.len) != 0) {
                fprintf(stderr, "a re-emitted manifest emits different text\n");
                abort();
            }
        }
        if (m->ntensors) tps_manifest_find(m, m->tensors[m->ntensors - 1].name);
        tps_manifest_free(m2);
        tps_buf_release(&b);
        tps_buf_release(&again);
    }
    tps_manifest_free(m);
    return 0;
}
