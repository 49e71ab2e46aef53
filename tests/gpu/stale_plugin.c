/* A device plugin from an older tpshard build, for tests/cli/verify_devsim.sh: its
 * tps_dev_plugin answers only ABI STALE_ABI, as a plugin built before the current ABI does.
 * With STALE_EXPORTS_ABI it also exports tps_dev_plugin_abi (plugins do from ABI 3 on), so
 * that the refusal can name the ABI it speaks; without it, it is a plugin from before ABI 3.
 * Built by verify/backends/gpu.mk into $(BUILD)/tests/stale-abi2 and stale-abi-old. */
#include <stddef.h>

struct tps_dev_api;
const struct tps_dev_api *tps_dev_plugin(unsigned abi, const size_t *sizes, size_t nsizes);

static const char table[64]; /* never handed out: no current host asks for ABI STALE_ABI */

const struct tps_dev_api *tps_dev_plugin(unsigned abi, const size_t *sizes, size_t nsizes)
{
    (void)sizes;
    (void)nsizes;
    return abi == STALE_ABI ? (const struct tps_dev_api *)(const void *)table : NULL;
}

#ifdef STALE_EXPORTS_ABI
const unsigned tps_dev_plugin_abi;
const unsigned tps_dev_plugin_abi = STALE_ABI;
#endif
