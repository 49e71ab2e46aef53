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
 * Nothing is executed or imported from a checkpoint; every reader validates its headers
 * before doing arithmetic with them. */
#ifndef TPS_CHECKPOINT_H
#define TPS_CHECKPOINT_H

#include "../lib/index.h"

tps_status tps_checkpoint_open(const char *path, tps_index **out, tps_error *err);

#endif
