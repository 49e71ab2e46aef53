/* formats/torch/'s face: torch zip + pickle checkpoints read and written.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_FORMATS_TORCH_H
#define TPS_FACE_FORMATS_TORCH_H

#include "torch/torch.h"
#include "torch/torch_write.h"

#endif
