/* Format detection and every single-file reader behind it (formats/open/checkpoint.h): torch.save
 * zip archives (zip + unpickler + the state-dict walk and its views), .npz, .npy and
 * safetensors, then a short read of every tensor, which runs the view readers (byte swap,
 * Fortran order, inflate). */
#include "fuzz.h"

#include "formats/open/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_memfile(data, size);
    if (!path) return 0;
    tps_index *ix = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_checkpoint_open(path, &ix, &err) == TPS_OK) fuzz_read_ends(ix);
    tps_index_free(ix);
    return 0;
}
