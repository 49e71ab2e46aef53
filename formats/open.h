/* formats/open/'s face: any checkpoint or shard set opened by its path, and planned.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_FORMATS_OPEN_H
#define TPS_FACE_FORMATS_OPEN_H

#include "open/checkpoint.h"
#include "open/plan_source.h"
#include "open/shardset.h"

#endif
