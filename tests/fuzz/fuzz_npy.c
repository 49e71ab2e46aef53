/* The .npy header parser (formats/numpy/npy.h) on the input as a whole .npy, both with the
 * "tell me how much you need" protocol and without, then the whole-file reader. */
#include "fuzz.h"

#include "formats/numpy/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tps_npy_header h;
    tps_error err;
    size_t need = 0;
    tps_error_clear(&err);
    if (tps_npy_parse_header(data, size, "fuzz.npy", &h, &need, &err) == TPS_OK && h.data_ofs == 0 &&
        need <= size) {
        /* The parser asked for no more than it had: that is a parser bug, crash loudly. */
        __builtin_trap();
    }
    tps_error_clear(&err);
    tps_npy_parse_header(data, size, "fuzz.npy", &h, NULL, &err);
    const char *path = fuzz_memfile(data, size);
    tps_index *ix = NULL;
    tps_error_clear(&err);
    if (path && tps_npy_open(path, &ix, &err) == TPS_OK && ix->ntensors) {
        unsigned char buf[64];
        const tps_tensor *t = &ix->tensors[0];
        tps_tensor_read(ix, t, 0, buf, t->nbytes < sizeof buf ? (size_t)t->nbytes : sizeof buf, &err);
    }
    tps_index_free(ix);
    return 0;
}
