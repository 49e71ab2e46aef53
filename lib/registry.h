/* lib/registry/'s face: the targets' one table, and Megatron-LM's planning, splitting,
 * resharding and Hugging Face view.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_LIB_REGISTRY_H
#define TPS_FACE_LIB_REGISTRY_H

#include "registry/megatron_as_hf.h"
#include "registry/megatron_plan.h"
#include "registry/megatron_reshard.h"
#include "registry/megatron_split.h"
#include "registry/registry.h"

#endif
