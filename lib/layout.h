/* lib/layout/'s face: layouts and presets.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_LIB_LAYOUT_H
#define TPS_FACE_LIB_LAYOUT_H

#include "layout/block.h"
#include "layout/layout.h"
#include "layout/presets.h"

#endif
