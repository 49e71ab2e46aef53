/* formats/dcp/'s face: torch.distributed.checkpoint sets read and written.
 * (cmd/ includes the library only through such faces, a header beside each folder named
 * after it: tests/lint/thin_cmd.sh) */
#ifndef TPS_FACE_FORMATS_DCP_H
#define TPS_FACE_FORMATS_DCP_H

#include "dcp/dcp.h"
#include "dcp/dcp_write.h"

#endif
