#include "shardset.h"

#include "../megatron/megatron_read.h"
#include "../megatron/megatron_set.h"
#include "../safetensors/safetensors.h"

tps_status tps_shardset_open(const char *dir, tps_shardset **out, tps_error *err)
{
    /* First: a tpshard-written Megatron checkpoint also has a tpshard.json (of torch files). */
    if (tps_megatron_is_checkpoint(dir)) return tps_megatron_shardset_open(dir, 0, out, NULL, err);
    return tps_shardset_open_with(dir, tps_safetensors_add_file, out, err);
}
