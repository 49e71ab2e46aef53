/* lib/targets/'s face: the targets' names, grids and adopt rules.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_LIB_TARGETS_H
#define TPS_FACE_LIB_TARGETS_H

#include "targets/adopt.h"
#include "targets/target.h"

#endif
