/* lib/set/'s face: the manifest, plans and their reports, retargeting, grids, unsharded views.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_LIB_SET_H
#define TPS_FACE_LIB_SET_H

#include "set/grid.h"
#include "set/grid_ep.h"
#include "set/manifest.h"
#include "set/plan.h"
#include "set/plan_report.h"
#include "set/retarget.h"
#include "set/unsharded.h"

#endif
