/* formats/safetensors/'s face: safetensors read and written.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_FORMATS_SAFETENSORS_H
#define TPS_FACE_FORMATS_SAFETENSORS_H

#include "safetensors/safetensors.h"

#endif
