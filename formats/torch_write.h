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

#include "../lib/set/sink.h"

extern const tps_sink tps_torch_sink;

#endif
