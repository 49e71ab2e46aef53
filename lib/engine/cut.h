/* The copy engine: streams every global tensor once, in order, and scatters its bytes to
 * the rank files that hold them.
 *
 * Split, reshard and merge are all this one pipeline; they differ only in where the global
 * bytes come from (a checkpoint reader, or a shard set gathering them from its ranks) and
 * in the target partitions (merge: everything replicated at tp 1, padding stripped).  Each
 * tensor is read front to back in chunks of at most chunk_bytes by a reader thread that runs
 * a few chunks ahead of the writer (lib/engine/prefetch.h), so memory stays bounded by those chunks
 * in flight plus one write buffer per rank file, whatever the model size; the input is read
 * in one sequential pass and each rank file is written sequentially. */
#ifndef TPS_CUT_H
#define TPS_CUT_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/index.h"
#include "../base/status.h"
#include "../set/manifest.h"
#include "../set/sink.h"
#include "file_names.h"
#include "outdir.h"

/* Reads bytes [off, off+len) of global tensor i (in manifest order). */
typedef tps_status (*tps_global_read_fn)(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err);

/* Where bytes [off, off + *len) of global tensor i lie in a plain file: its open fd, its path
 * (for messages), the file offset of byte off, and in *len how many bytes from off on lie
 * there contiguously.  False when they do not lie in a plain file as they are (a pickled
 * storage, a dtype conversion, replicas still to be compared): those are read. */
typedef bool (*tps_global_locate_fn)(void *ctx, size_t i, uint64_t off, int *fd, const char **path, uint64_t *file_off,
                                     uint64_t *len);

/* A tps_global_locate_fn's answer for byte off of tensor t of index ix: true (and where, and
 * the bytes to t's end) when t is a plain file range. */
bool tps_tensor_locate(const tps_index *ix, const tps_tensor *t, uint64_t off, int *fd, const char **path,
                       uint64_t *file_off, uint64_t *len);

typedef struct tps_progress {
    uint64_t done, total; /* bytes of global tensors streamed */
    const char *tensor;   /* the tensor in flight */
} tps_progress;

typedef struct tps_cut_opts {
    const tps_sink *sink;      /* how files are laid out (formats/: tps_safetensors_sink) */
    const bool *write_rank;    /* NULL: every rank; else only ranks with write_rank[r] get a file
                                  (the others are still computed for the manifest's sizes and CRCs) */
    const char *name_template; /* file name per rank (and part): "{rank}", "{tp}", "{part}" replaced;
                                  NULL for the default */
    bool checkpoint;           /* a plain checkpoint, not a shard set (merge): tp 1, no tp_rank/tp_size
                                  metadata, Hugging Face names (model.safetensors, or with parts
                                  model-00001-of-0000N.safetensors and model.safetensors.index.json);
                                  name_template is then unused */
    uint64_t chunk_bytes;      /* 0: the default (1 MiB; 8 in flight) */
    /* NULL, or where the read()'s bytes lie (same ctx as read): such files are mapped, and
     * their bytes checksummed and written straight from the page cache (one copy per byte,
     * lib/base/iocache.h); read() remains for everything else. */
    tps_global_locate_fn locate;
    void (*progress)(const tps_progress *p, void *arg);
    void *progress_arg;
    uint64_t max_part_bytes; /* 0: one file per rank.  Else each rank's tensors go, in manifest order,
                                into parts of at most this many data bytes (a tensor slice larger than
                                that gets a part of its own); the template must then contain {part},
                                and each rank also gets a Hugging Face style index naming its parts. */
    void (*file_done)(const char *name, uint64_t bytes, void *arg); /* after each file is complete
                                                                        (for -v); NULL for none */
    void *file_done_arg;
    /* After global tensor i has streamed, with the CRC-32 of its bytes: a source that knows
     * what they must be (a shard set's manifest) checks them here, on bytes the copy read
     * anyway; a failure stops the copy.  NULL for none. */
    tps_status (*tensor_done)(void *arg, size_t i, uint32_t crc, tps_error *err);
    void *tensor_done_arg;
    /* A layout of files the caller decides (a Megatron checkpoint, lib/registry/megatron_out.h): with
     * nparts > 0 every rank has the same parts, part p holding manifest tensors
     * [part_first[p], part_first[p+1]) (max_part_bytes unused); file_name (NULL: the template's)
     * names part p of rank r, and may hold '/' (the directories are made under the output);
     * file_meta (NULL: tp_rank and tp_size) gives that file's sink metadata. */
    const size_t *part_first;
    size_t nparts;
    tps_status (*file_name)(void *arg, uint64_t r, uint64_t tp, size_t p, char *out, size_t size, tps_error *err);
    const tps_kv *(*file_meta)(void *arg, uint64_t r, size_t p, size_t *n);
    void *files_arg;
} tps_cut_opts;

/* Every rank's parts and file names, decided before anything is written. */
typedef struct tps_cut_files tps_cut_files;

/* Splits each rank's tensors into parts (o->max_part_bytes) and names every file into
 * m->files (rank-major, parts in order).  Refuses with TPS_EARG, before anything is
 * written, names that collide: two files, or a file and the manifest or an index. */
tps_status tps_cut_files_plan(tps_manifest *m, const tps_cut_opts *o, tps_cut_files **out, tps_error *err);
void tps_cut_files_free(tps_cut_files *f); /* accepts NULL */

/* Streams every global tensor through read() into the files planned by tps_cut_files_plan,
 * in od's temporary directory (od NULL: nothing is written, sizes and CRCs are still
 * computed), filling every m->files[k]'s size and CRC and every m->tensors[i].crc.  m->tp
 * and the tensors' partitions must be set and checked. */
tps_status tps_cut(tps_manifest *m, const tps_cut_files *files, tps_global_read_fn read, void *ctx,
                   const tps_outdir *od, const tps_cut_opts *o, tps_error *err);

#endif
