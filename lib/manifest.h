/* The shard-set manifest, tpshard.json, and opening a shard set.
 *
 * A shard set is a directory with one safetensors file per rank (or per rank and part)
 * and tpshard.json, which makes it self-describing: reshard, merge, check and verify need
 * nothing else.  The manifest holds the format version, the TP size, the source's identity,
 * the layout text, every file with its size and CRC-32, and for every tensor its dtype,
 * global shape, partition spec, per-rank shapes and the CRC-32 of the global tensor's
 * C-order bytes (without padding).  Schema: README.md, "The manifest". */
#ifndef TPS_MANIFEST_H
#define TPS_MANIFEST_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "index.h"
#include "partition.h"
#include "status.h"

#define TPS_MANIFEST_NAME "tpshard.json"
#define TPS_MANIFEST_VERSION 1

typedef struct tps_manifest_tensor {
    char *name;
    tps_dtype dtype;
    int ndim;
    uint64_t shape[TPS_MAX_DIMS]; /* global, unpadded */
    tps_partition part;
    uint64_t nbytes; /* global, unpadded */
    uint32_t crc;    /* CRC-32 of the global tensor's bytes */
    char *rule;      /* label of the layout rule that cut it */
} tps_manifest_tensor;

typedef struct tps_manifest_file {
    char *name; /* plain file name inside the shard-set directory */
    uint64_t rank;
    uint64_t part; /* 0-based part of that rank's files */
    uint64_t size;
    uint32_t crc; /* CRC-32 of the whole file */
} tps_manifest_file;

typedef struct tps_source_info {
    char *path;   /* as given to split */
    char *format; /* reader format name */
    uint64_t bytes;
    size_t nfiles;
    struct {
        char *name; /* base name */
        uint64_t size;
    } *files;
} tps_source_info;

typedef struct tps_manifest {
    uint64_t version;
    uint64_t tp;
    char *tool;          /* "tpshard 0.1.0" */
    char *layout_name;   /* "preset:llama" or the layout file path */
    char *layout_text;   /* the YAML the set was cut with */
    char *config_path;   /* the config.json the sizes came from, as given; NULL when none */
    char *config_keys;   /* the keys of it tpshard reads, a compact JSON object; NULL when none */
    tps_source_info source;
    tps_manifest_tensor *tensors; /* in the order they appear in each rank's files */
    size_t ntensors;
    tps_manifest_file *files; /* sorted by (rank, part) */
    size_t nfiles;
    /* private: names of tensors and files, built by the loader or tps_manifest_index */
    tps_name_hash tensor_names, file_names;
} tps_manifest;

/* Reads DIR/tpshard.json strictly: unknown version refused, every field type-checked,
 * partitions re-validated against shapes and tp (tps_partition_check), file names plain
 * (no '/', no '..'), each rank 0..tp-1 present. */
tps_status tps_manifest_load(const char *dir, tps_manifest **out, tps_error *err);
/* Whether dir holds a tpshard.json (a regular file): what makes it a shard set, before the
 * manifest is read. */
bool tps_is_shard_set(const char *dir);
/* The same checks on manifest text already in memory (len bytes); what names it in
 * messages (the fuzz target and tests use it). */
tps_status tps_manifest_parse(const char *text, size_t len, const char *what, tps_manifest **out, tps_error *err);

/* Writes the manifest as pretty JSON into buf (deterministic: same input, same bytes). */
tps_status tps_manifest_to_json(const tps_manifest *m, tps_buf *buf, tps_error *err);

/* Hashes the tensor and file names (the loader does; a caller that builds a manifest may),
 * refusing a name listed twice.  Call again after changing the arrays. */
tps_status tps_manifest_index(tps_manifest *m, const char *what, tps_error *err);

/* By hash once indexed; a manifest built by hand and never indexed is scanned. */
const tps_manifest_tensor *tps_manifest_find(const tps_manifest *m, const char *name);
const tps_manifest_file *tps_manifest_find_file(const tps_manifest *m, const char *name);

/* Bytes of rank r's slice of tensor i (padding included: it is in the rank's tensor). */
tps_status tps_manifest_rank_bytes(const tps_manifest *m, size_t i, uint64_t r, uint64_t *out, tps_error *err);

void tps_manifest_free(tps_manifest *m);

/* An opened shard set: its manifest and, per rank, an index over that rank's files. */
typedef struct tps_shardset {
    char *dir;
    tps_manifest *m;
    tps_index **rank; /* rank[r]: NULL until opened */
} tps_shardset;

tps_status tps_shardset_open(const char *dir, tps_shardset **out, tps_error *err);

/* Opens only rank r's files (a rank that loads its own slices touches nothing else) and
 * checks each tensor's dtype and shape against the manifest. */
tps_status tps_shardset_open_rank(tps_shardset *ss, uint64_t r, const tps_index **out, tps_error *err);

/* The global tensor's C-order bytes (unpadded) [off, off+len), gathered from the ranks that
 * hold them (the lowest rank of replicas).  Opens rank files as needed. */
tps_status tps_shardset_read_global(tps_shardset *ss, const tps_manifest_tensor *t, uint64_t off, void *buf,
                                    size_t len, tps_error *err);

void tps_shardset_free(tps_shardset *ss);

#endif
