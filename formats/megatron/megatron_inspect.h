/* tpshard inspect of a Megatron-LM checkpoint directory (formats/megatron/megatron_read.h):
 * its layout, the model its args describe and every rank file's tensors, as text or JSON. */
#ifndef TPS_FORMATS_MEGATRON_INSPECT_H
#define TPS_FORMATS_MEGATRON_INSPECT_H

#include <stdbool.h>

#include "../../lib/base/buf.h"
#include "../../lib/base/status.h"

/* Appends the account of the checkpoint at path to out (JSON with json, ending in a newline). */
tps_status tps_megatron_inspect(const char *path, bool json, tps_buf *out, tps_error *err);

#endif
