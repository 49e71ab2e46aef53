#include "shardset.h"

#include "safetensors.h"

tps_status tps_shardset_open(const char *dir, tps_shardset **out, tps_error *err)
{
    return tps_shardset_open_with(dir, tps_safetensors_add_file, out, err);
}
