/* lib/refusal/'s face for cmd/: refusals grouped by cause, and the sizes a layout leaves
 * unknown, as the commands print them (tests/lint/thin_cmd.sh says what a face is). */
#ifndef TPS_FACE_LIB_REFUSAL_H
#define TPS_FACE_LIB_REFUSAL_H

#include "refusal/problems.h"
#include "refusal/problems_sizes.h"

#endif
