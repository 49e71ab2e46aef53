/* Writing torch.save archives (Megatron-LM's model_optim_rng.pt), streamed: the copy
 * engine's sink (lib/set/sink.h) named "torch".
 *
 * Byte layout (torch.h has the reader's view; zip_write.h the container): entries under
 * one root folder, the file's name without its extension ("model_optim_rng"; a counting
 * file, opened with a NULL path, uses that name too, so it has the size and CRC the real
 * rank file has):
 *   <root>/data.pkl     the pickle (pickle_write.h), written at open
 *   <root>/data/<k>     one stored record per tensor, k = "0", "1", ... in sink order, its
 *                       data 64-byte aligned; the tensors' bytes stream into them in order
 *   <root>/version      "3\n"        } at commit
 *   <root>/byteorder    "little"     }
 * then the central directory and end records.
 *
 * The pickle is a dict described by the file's string metadata (the contract of issue 18):
 *   torch.top            a JSON object (pickle_write.h's encoding) of the top-level entries
 *                        that precede the tensor dict, in order (args, checkpoint_version,
 *                        iteration, ...); default none
 *   torch.model_key      the key of the tensor dict; default "model"
 *   torch.model_entries  a JSON array of the tensor dict's keys in order: each a tensor of
 *                        the file (every one exactly once) or a key whose value is None
 *                        (an _extra_state entry); default the tensors in sink order
 * The tensor dict is a collections.OrderedDict.  Other torch.* keys are refused; keys
 * outside torch.* (the engine's tp_rank, tp_size) are not part of a torch archive and are
 * ignored.  Refused dtypes: the sub-byte ones (F4, F6_*), which torch cannot hold.
 *
 * Memory: the pickle and one small record per tensor; no tensor bytes are held.
 * Test hook: TPS_TORCH_ZIP64=1 in the environment writes every entry and the end record
 * in ZIP64 form, as a file past 4 GiB is written. */
#ifndef TPS_TORCH_WRITE_H
#define TPS_TORCH_WRITE_H

#include "../../lib/set/sink.h"
#include "pickle.h"
#include "zip_write.h"

extern const tps_sink tps_torch_sink;

/* The torch dtype that holds elements of dt; NULL for the sub-byte ones. */
const tps_torch_dtype *tps_torch_dtype_of(tps_dtype dt);

/* Ends a torch.save archive's records: <root>/version "3\n" and <root>/byteorder "little". */
tps_status tps_torch_archive_tail(tps_zipw *z, const char *root, tps_error *err);

/* A torch.save archive at path (committed in place, outfile.h) of the value value_json
 * encodes (pickle_write.h's JSON; no tensors): what Megatron-Core's common.pt is. */
tps_status tps_torch_write_value(const char *path, const char *value_json, tps_error *err);

#endif
