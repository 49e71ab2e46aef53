/* Opening any supported checkpoint as one tensor index.
 *
 * tps_checkpoint_open looks at what path is and hands it to the matching reader:
 *   - a directory: model.safetensors.index.json, then model.safetensors, then
 *     pytorch_model.bin.index.json, then pytorch_model.bin inside it;
 *   - a file named *.index.json: a Hugging Face multi-file index (safetensors or torch);
 *   - a file starting with "PK\3\4": a torch.save zip archive, or an .npz when its members
 *     are .npy files;
 *   - a file starting with "\x93NUMPY": a single .npy array;
 *   - anything else: a single safetensors file.
 * A single file that is one part of a multi-file checkpoint is refused (see below).
 * Nothing is executed or imported from a checkpoint; every reader validates its headers
 * before doing arithmetic with them. */
#ifndef TPS_CHECKPOINT_H
#define TPS_CHECKPOINT_H

#include "../../lib/base/index.h"

/* A file that is one part of a multi-file checkpoint is refused (TPS_EINVALID), naming the
 * index beside it that lists it with other files (any *.index.json), or else the Hugging
 * Face part pattern its name has (*-00001-of-00002.*): cutting one part alone would drop
 * the other parts' tensors without a word.  Pass the directory or the index instead. */
tps_status tps_checkpoint_open(const char *path, tps_index **out, tps_error *err);

/* The same, but one part of a set opens (inspect shows it): part_of (size bytes) receives
 * the sentence saying which set it is part of, or "" when it is whole. */
tps_status tps_checkpoint_open_part(const char *path, tps_index **out, char *part_of, size_t size, tps_error *err);

#endif
