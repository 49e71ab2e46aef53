/* The safetensors header reader (formats/safetensors/safetensors.h) on the input as a whole
 * file, then a short read of every tensor it accepted. */
#include "fuzz.h"

#include "formats/safetensors/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_memfile(data, size);
    if (!path) return 0;
    tps_index *ix = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_safetensors_open(path, &ix, &err) == TPS_OK) {
        for (size_t i = 0; i < ix->ntensors; i++) {
            const tps_tensor *t = &ix->tensors[i];
            unsigned char buf[32];
            size_t n = t->nbytes < sizeof buf ? (size_t)t->nbytes : sizeof buf;
            tps_error_clear(&err);
            tps_tensor_read(ix, t, 0, buf, n, &err);
            tps_index_find(ix, t->name);
        }
        for (size_t i = 0; i < ix->nmeta; i++) tps_index_meta(ix, ix->meta[i].key);
    }
    tps_index_free(ix);
    return 0;
}
