/* formats/megatron/'s face: Megatron-LM checkpoints read.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_FORMATS_MEGATRON_H
#define TPS_FACE_FORMATS_MEGATRON_H

#include "megatron/megatron_inspect.h"
#include "megatron/megatron_read.h"
#include "megatron/megatron_set.h"
#include "megatron/megatron_target.h"

#endif
