/* lib/engine/'s face: cutting, converting, writing and publishing a shard set, checking one.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_LIB_ENGINE_H
#define TPS_FACE_LIB_ENGINE_H

#include "engine/check_set.h"
#include "engine/convert.h"
#include "engine/cut.h"
#include "engine/outdir.h"
#include "engine/publish.h"
#include "engine/shardset.h"
#include "engine/write_set.h"

#endif
