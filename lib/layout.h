/* lib/layout/'s face: layouts, presets, the problems a plan refuses for.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_LIB_LAYOUT_H
#define TPS_FACE_LIB_LAYOUT_H

#include "layout/block.h"
#include "layout/layout.h"
#include "layout/presets.h"
#include "layout/problems.h"
#include "layout/problems_sizes.h"

#endif
