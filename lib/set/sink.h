/* Where the copy engine writes: a sink of checkpoint files.
 *
 * The engine (lib/engine/cut.h) decides which bytes go to which rank file and in which order; a
 * sink decides how a file is laid out on disk around those bytes (its header, its
 * metadata).  lib/ declares the interface and formats/ implements it
 * (formats/safetensors/safetensors.h, tps_safetensors_sink), and the caller hands the sink in,
 * so the library never depends on a file format.
 *
 * A file is opened with its tensors, in the order their bytes will be written, and string
 * metadata; the engine then writes exactly those tensors' bytes in that order, and commits
 * (the file appears complete under its name, or not at all) or aborts.  A NULL path opens a
 * counting file: nothing is written, but commit still gives the size and CRC-32 the file
 * would have (split --only-rank uses it so every node's manifest is identical). */
#ifndef TPS_SINK_H
#define TPS_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "../base/dtype.h"
#include "../base/index.h"
#include "../base/status.h"

/* One tensor of a file being written: its shape is the shape stored in that file. */
typedef struct tps_sink_tensor {
    const char *name;
    tps_dtype dtype;
    int ndim;
    const uint64_t *shape;
} tps_sink_tensor;

typedef struct tps_sink_file tps_sink_file;

typedef struct tps_sink {
    const char *format; /* the format's name, as the manifest's readers know it */
    tps_status (*open)(const char *path, const tps_sink_tensor *tensors, size_t n, const tps_kv *meta, size_t nmeta,
                       tps_sink_file **out, tps_error *err);
    tps_status (*write)(tps_sink_file *f, const void *buf, size_t len, tps_error *err);
    /* The same, for bytes whose CRC-32 the caller already has: the file's CRC is extended
     * with crc32_combine instead of a second pass over the bytes. */
    tps_status (*write_crc)(tps_sink_file *f, const void *buf, size_t len, uint32_t crc, tps_error *err);
    /* Fails unless exactly the announced bytes were written; fills the whole file's CRC-32
     * and size.  Frees f in every case. */
    tps_status (*commit)(tps_sink_file *f, uint32_t *crc, uint64_t *size, tps_error *err);
    /* Removes what was written and frees f; accepts NULL. */
    void (*abort)(tps_sink_file *f);
} tps_sink;

#endif
