/* lib/base/'s face: status, buffers, JSON, dtypes, tensor indexes, the I/O cache, JUnit.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_LIB_BASE_H
#define TPS_FACE_LIB_BASE_H

#include "base/buf.h"
#include "base/dtype.h"
#include "base/index.h"
#include "base/iocache.h"
#include "base/json.h"
#include "base/junit.h"
#include "base/status.h"

#endif
