/* PyTorch Distributed Checkpoint (torch.distributed.checkpoint, FileSystemWriter) directories
 * as a source, read without executing anything.
 *
 * Byte layout (torch/distributed/checkpoint/metadata.py and filesystem.py; checked on
 * directories PyPI torch 2.5.1 saves, tests/interop/torch/torch2/torch2_dcp.py):
 *   <dir>/.metadata       a pickle (protocol 4) of Metadata, a dataclass whose state is
 *                         {"state_dict_metadata": {fqn: TensorStorageMetadata | BytesStorageMetadata},
 *                          "planner_data": ..., "storage_data": {MetadataIndex: _StorageInfo},
 *                          "storage_meta": StorageMeta | None}
 *       TensorStorageMetadata state {"properties": TensorProperties, "size": torch.Size,
 *                                    "chunks": [ChunkStorageMetadata, ...]}
 *       TensorProperties state      (dtype, layout, requires_grad, memory_format, pin_memory)
 *       ChunkStorageMetadata state  {"offsets": torch.Size, "sizes": torch.Size}
 *       MetadataIndex state         {"fqn": str, "offset": torch.Size, "index": int | None}
 *       _StorageInfo state          {"relative_path": str, "offset": int, "length": int}
 *   <dir>/__R_N.distcp    what rank R's writer thread N wrote: each item at [offset,
 *                         offset + length) of the file named by its _StorageInfo.  In torch
 *                         2.x a tensor chunk's bytes are a whole torch.save stream (a zip,
 *                         torch.h) of the chunk as one contiguous tensor, not raw elements.
 * A tensor of global size S is assembled from its chunks: chunk c holds the box
 * [offsets_c, offsets_c + sizes_c) of the global index space, in C order.
 *
 * What opening checks: the pickle passes the restricted unpickler (pickle.h: only the
 * dataclasses above, torch.Size, dtypes and the layout/memory-format names are allowed);
 * every chunk lies inside its tensor (overflow-checked), has as many dimensions, and the
 * chunks of a tensor neither overlap nor leave a hole (their volumes sum to the tensor's
 * and no two boxes intersect); every chunk has exactly one storage entry whose
 * relative_path is a plain file name in the directory and whose range lies inside that
 * file; the torch.save stream there is a valid archive (zip.h window) holding one tensor of
 * the chunk's sizes and the tensor's dtype, C-contiguous in one stored little-endian
 * record.  Anything else is TPS_EINVALID naming the tensor and the chunk.
 *
 * Reading: names as saved (the fully qualified names of the saved state dict), tensors in
 * the order of state_dict_metadata.  A tensor held whole by one chunk is a plain file range
 * (index.h); otherwise its bytes [off, off + len) are gathered from the chunks' ranges, run
 * by run (a run is as long as the chunk covers the trailing dimensions whole: a dim-0
 * shard of FSDP2 gives one run per chunk), never holding more than the caller's buffer.
 * Non-tensor entries (BytesStorageMetadata: step counters, RNG, dataloader state) are left
 * out and counted (tps_index_meta "dcp.bytes_entries").  The torch.save records' CRCs are
 * not checked (torch never checks them; `tpshard check` checks what tpshard writes). */
#ifndef TPS_DCP_H
#define TPS_DCP_H

#include "../../lib/base/index.h"

/* Largest .metadata read (a model of 100k tensors and 64 chunks each is far below it). */
#define TPS_DCP_MAX_METADATA (1ull << 30)

/* True when dir holds a regular file ".metadata". */
bool tps_dcp_is_dir(const char *dir);

/* The DCP directory dir as one index (format "dcp"). */
tps_status tps_dcp_open(const char *dir, tps_index **out, tps_error *err);

/* The names of ix's non-tensor (BytesStorageMetadata) entries, in .metadata's order, owned
 * by ix; 0 when ix is not a DCP index.  Megatron-Core's torch_dist keeps _extra_state and
 * RNG state there (formats/megatron/megatron_dist.h). */
size_t tps_dcp_bytes_entries(const tps_index *ix, const char *const **names);

#endif
