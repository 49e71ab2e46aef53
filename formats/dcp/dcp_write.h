/* Writing a PyTorch Distributed Checkpoint (torch.distributed.checkpoint, formats/dcp/dcp.h has
 * the reader's view) as one saving rank writes it, streamed: the copy engine's sink
 * (lib/set/sink.h) named "dcp".
 *
 * The sink's file is the rank's __R_N.distcp; at commit the sink also writes .metadata
 * beside it (the directory's one writer: a single-file DCP), so a file opened with a path
 * is a whole DCP directory.  Byte layout, as PyPI torch 2.5.1's FileSystemWriter writes it
 * (checked on what megatron-core 0.16.1 saves, tests/interop/megatron/real/megatron_real_dist_write.py):
 *   __0_0.distcp   first the non-tensor entries, each the torch.save archive of its value
 *                  (root folder "archive", as torch.save to a BytesIO names it); then one
 *                  chunk per sink tensor, in sink order: a whole torch.save archive of the
 *                  chunk as one contiguous tensor (archive/data.pkl, archive/data/0,
 *                  archive/version, archive/byteorder; zip offsets counting from the
 *                  archive's own first byte, zip_write.h tps_zipw_open_in)
 *   .metadata      a pickle of Metadata (pickle_write.h, protocol 2; DCP loads it with
 *                  pickle.load): state_dict_metadata (fqn -> TensorStorageMetadata(
 *                  TensorProperties(dtype, _get_layout("torch.strided"), False,
 *                  _MEM_FORMAT_ENCODING(0), False), torch.Size, [ChunkStorageMetadata]) or
 *                  BytesStorageMetadata()), planner_data None, storage_data (MetadataIndex ->
 *                  _StorageInfo(relative path, offset, length)), storage_meta None
 * String metadata of the file (the sink's contract):
 *   dcp.chunks  a JSON array, one item per sink tensor in sink order: [fqn, [global size],
 *               [chunk offsets]]; the chunk's sizes are the tensor's shape with 1s
 *               prepended up to the global rank (a layer of a stacked tensor), and the
 *               box must lie inside the global size; chunks of one fqn are listed together
 *               in .metadata in the order they come, fqns in order of first appearance
 *   dcp.bytes   a JSON array of [key, value] (value in pickle_write.h's JSON): the
 *               BytesStorageMetadata entries, listed first in .metadata
 * Other dcp.* keys are refused; keys outside dcp.* (the engine's) are ignored.  A file
 * opened without a path (counting) writes no .metadata.
 * Memory: the pickles and one small record per chunk; no tensor bytes are held. */
#ifndef TPS_DCP_WRITE_H
#define TPS_DCP_WRITE_H

#include "../../lib/set/sink.h"

extern const tps_sink tps_dcp_sink;

#endif
