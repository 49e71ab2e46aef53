/* PyTorch torch.save checkpoints (pytorch_model.bin), read without executing anything.
 *
 * Byte layout (torch/serialization.py's _save, caffe2/serialize/inline_container.cc): a ZIP
 * archive (zip.h) whose entries all sit under one root folder <root>/ (taken from the first
 * entry):
 *   <root>/data.pkl            protocol-2 pickle of the state dict (pickle.h)
 *   <root>/data/<key>          raw storage bytes, one record per storage, stored (miniz
 *                              pads each local header with an "FB" extra so data starts on
 *                              a 64-byte boundary)
 *   <root>/version             "3\n" (or <root>/.data/version); must be 1..10
 *   <root>/byteorder           "little" or "big"; absent means little (torch >= 2.1 writes it)
 *   <root>/.format_version, .storage_alignment, .data/serialization_id: informational
 * A tensor is (storage, storage_offset, size, stride, dtype); its element (i_0..i_n) is at
 * byte (storage_offset + sum i_k*stride_k) * element_size of record data/<key>.
 *
 * Reading rules:
 *   - The record's size must equal numel * element size of the storage type (UntypedStorage:
 *     numel counts bytes); every element a tensor can reach must lie inside its record.
 *   - Fast path: a tensor whose elements are C-contiguous in a STORED record of a
 *     little-endian archive is a plain file range (index.h), read in place like safetensors.
 *     Anything else (transposed or strided views, big-endian archives, deflated records) is
 *     a view (view.h) gathered on read.  Tensors sharing a storage point into one record.
 *   - dtypes: every torch dtype with a safetensors equivalent (bool, u8, i8, i16, i32, i64,
 *     u16, u32, u64, f16, bf16, f32, f64, c64, float8 e4m3fn/e5m2/e4m3fnuz/e5m2fnuz/e8m0fnu);
 *     complex128, complex32, quantized and float4 tensors are refused by name.
 *   - Which dict holds the weights: the pickle's top level must be a dict.  While the
 *     current dict has no tensor values of its own and has a dict-valued key "state_dict",
 *     "model" or "module" (tried in that order), the reader descends into it; so
 *     {"model": sd, "optimizer": ..., "epoch": 3} and {"state_dict": sd} read as sd.  Below
 *     the chosen dict every tensor is named by its key path joined with '.', list and tuple
 *     elements by their index ("layers.0.weight"); numbers, strings and None are skipped.
 *   - CRCs: the archive is opened with TPS_ZIP_CRC_ZERO_IS_ABSENT (zip.h).  data.pkl and
 *     the small records are always checked; the storage records are checked at open when
 *     the file is at most TPS_EAGER_CRC_MAX bytes (zip.h), else left to the caller
 *     (re-reading a large checkpoint at open would double the cost of a split; torch never
 *     checks them).
 *   - Refused, with how to re-save: the legacy pre-1.6 format (a pickle stream, not a zip)
 *     and TorchScript archives (constants.pkl or code/ entries). */
#ifndef TPS_TORCH_H
#define TPS_TORCH_H

#include "../../lib/base/index.h"

/* True when the first n (up to 8) bytes of a file of file_size bytes are a pickle stream
 * (legacy torch.save output) and cannot be a safetensors file: either the legacy magic
 * number's pickle, or "\x80" + protocol 2..5 where the bytes read as safetensors' u64
 * header length would exceed the file. */
bool tps_torch_is_pickle_magic(const unsigned char *magic, size_t n, uint64_t file_size);

/* One torch.save archive as an index (format "torch"); also refuses legacy files. */
tps_status tps_torch_open(const char *path, tps_index **out, tps_error *err);

/* Any file starting with "PK\3\4": an .npz (format "npz") when every entry is a "*.npy"
 * member, otherwise a torch archive. */
tps_status tps_zip_checkpoint_open(const char *path, tps_index **out, tps_error *err);

/* Adds one archive's file and tensors to ix, whose reader state must already be a view
 * state (tps_view_state_init); used once per file of a multi-file checkpoint. */
tps_status tps_torch_add_file(tps_index *ix, const char *path, tps_error *err);

/* For a reader that picks an archive's tensors itself (Megatron's model_optim_rng.pt holds
 * args, optimizer and RNG state beside the model): tps_torch_add_file with pick called on the
 * pickle's top-level dict while the archive is open; pick adds the tensors it wants, under
 * names of its choice, with tps_torch_file_add_tensor (nothing else is indexed). */
struct tps_pv;
typedef struct tps_torch_file tps_torch_file;
typedef tps_status (*tps_torch_pick_fn)(void *ctx, tps_torch_file *f, const struct tps_pv *top, tps_error *err);
tps_status tps_torch_add_file_pick(tps_index *ix, const char *path, tps_torch_pick_fn pick, void *ctx, tps_error *err);
/* The same; records_crc false leaves every storage record's CRC to the caller whatever the
 * file's size (data.pkl and the small records are still checked). */
tps_status tps_torch_add_file_pick_crc(tps_index *ix, const char *path, tps_torch_pick_fn pick, void *ctx,
                                       bool records_crc, tps_error *err);
/* Recomputes the CRC-32 of every record of the torch archive at path (what open leaves to
 * the caller): TPS_EMISMATCH naming the record on a difference. */
tps_status tps_torch_verify_records(const char *path, tps_error *err);
tps_status tps_torch_file_add_tensor(tps_torch_file *f, const char *name, const struct tps_pv *tensor, tps_error *err);
/* Counts one visit of a value by pick's walk: shared containers can make the tree of a
 * small pickle exponentially large, so a walk gets the budget the built-in one has. */
tps_status tps_torch_file_visit(tps_torch_file *f, tps_error *err);

/* A Hugging Face pytorch_model.bin.index.json, or a file named *.bin.index.json
 * ({"metadata": {...}, "weight_map": {"tensor": "pytorch_model-00001-of-00002.bin"}}), as
 * one checkpoint (format "torch-index").  Every weight_map file must be a plain name in
 * the index's directory and hold exactly the tensors the map assigns to it.  String
 * values of "metadata" are recorded as index metadata. */
tps_status tps_torch_index_open(const char *path, tps_index **out, tps_error *err);

#endif
