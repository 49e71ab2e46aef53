/* lib/megatron/'s face: Megatron-LM planning, splitting, resharding, and its Hugging Face view.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_LIB_MEGATRON_H
#define TPS_FACE_LIB_MEGATRON_H

#include "megatron/megatron_as_hf.h"
#include "megatron/megatron_plan.h"
#include "megatron/megatron_reshard.h"
#include "megatron/megatron_split.h"

#endif
