/* The restricted unpickler (formats/torch/pickle.h) on a raw pickle stream. */
#include "fuzz.h"

#include "formats/torch/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tps_pickle *p = NULL;
    const tps_pv *root = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_pickle_load(data, size, "fuzz.pkl", &p, &root, &err) == TPS_OK) tps_pickle_count(p);
    tps_pickle_free(p);
    return 0;
}
