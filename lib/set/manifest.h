/* The shard-set manifest, tpshard.json.
 *
 * A shard set is a directory with one safetensors file per rank (or per rank and part)
 * and tpshard.json, which makes it self-describing: reshard, merge, check and verify need
 * nothing else.  The manifest holds the format version, the TP size, the source's identity,
 * the layout text, every file with its size and CRC-32, and for every tensor its dtype,
 * global shape, partition spec, per-rank shapes and the CRC-32 of the global tensor's
 * C-order bytes (without padding).  Schema: docs/design.md, "The shard set on disk". */
#ifndef TPS_MANIFEST_H
#define TPS_MANIFEST_H

#include <stdbool.h>
#include <stdint.h>

#include "../base/buf.h"
#include "../base/index.h"
#include "../base/json.h"
#include "../base/status.h"
#include "../base/strpool.h"
#include "../partition/partition.h"
#include "../partition/partpool.h"

#define TPS_MANIFEST_NAME "tpshard.json"
#define TPS_MANIFEST_VERSION 1
/* The largest tp a shard set may have: the writer refuses more (a usage error) and the
 * manifest reader refuses more, so nothing is written that cannot be read. */
#define TPS_MAX_TP 65536u

typedef struct tps_manifest_tensor {
    char *name;
    tps_dtype dtype;
    int ndim;
    uint64_t shape[TPS_MAX_DIMS]; /* global, unpadded */
    /* In the manifest's partition pool (lib/partition/partpool.h): immutable, shared by every
     * tensor cut the same way.  Set and changed with tps_manifest_set_part only. */
    const tps_partition *part;
    uint64_t nbytes; /* global, unpadded */
    uint32_t crc;    /* CRC-32 of the global tensor's bytes */
    char *rule;      /* label of the layout rule that cut it */
    /* A serving engine's target (lib/targets/target.h): the name rank files hold this tensor's slice
     * under (NULL: its own name).  Consecutive tensors with the same target_name are one
     * tensor in the files, their rank slices concatenated along dimension 0 in manifest
     * order; with target_stack S > 0 they form S equal groups, each concatenated so, stacked
     * along a new leading dimension (MoE experts: [E, 2I/T, H]). */
    char *target_name;
    uint64_t target_stack;
    /* With a target: 0, or B > 1 when rank files hold this tensor's rank slice with its rows
     * blocked (lib/targets/target.h, blocked:): the slice's dimension 0 is groups of one partition
     * unit, each B equal blocks ([q_h; k_h; v_h] per GPT-NeoX head), and the file holds
     * block 0 of every group, then block 1, ... ([q_r; k_r; v_r]). */
    uint64_t target_blocks;
    /* With a target: rank files hold this 2-D or 3-D tensor's rank slice with its last two
     * dimensions swapped (transposed:). */
    bool target_transpose;
    /* With a target: rank files hold this tensor's rank slice with its last two dimensions
     * merged (flattened:), a reshape of the same bytes: an MXFP4 blocks tensor
     * [E, rows, n, 16] as vLLM's byte view [E, rows, 16 n].  The manifest keeps the source's
     * shape, so merge restores it. */
    bool target_flatten;
    /* With a target (rank0:): the engine holds this tensor whole on rank 0 and zeros on the
     * other ranks (vLLM's GPT-OSS w2_bias, added inside each rank's experts before the
     * all-reduce).  The partition says so as a dimension-0 split padded to tp times its length,
     * so rank 0's slice is the tensor and the others' are padding; the rules' own partition
     * (replicated) comes back when the target is cleared. */
    bool target_rank0;
    /* With a target (rope_halves:): rank files hold each partition unit (an attention head)
     * of this tensor's rank slice with its rows from RoPE-interleaved pairs (2i, 2i+1) to
     * rotate-half order [even rows; odd rows] (vLLM's Llama 4 permute_qk_weight_for_rotary). */
    bool target_rope_halves;
    /* In a TP x PP grid (pp > 1, lib/set/grid.h): the one pipeline stage whose files hold it. */
    uint64_t pp_stage;
} tps_manifest_tensor;

typedef struct tps_manifest_file {
    char *name; /* plain file name inside the shard-set directory */
    uint64_t rank;
    uint64_t part; /* 0-based part of that rank's files */
    uint64_t size;
    uint32_t crc; /* CRC-32 of the whole file */
    uint64_t pp_rank; /* in a TP x PP grid (lib/set/grid.h): the stage whose tensors it holds */
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

/* Tensors of the source that the layout's skip: left out (non-persistent buffers such as
 * RoPE's inv_freq): in no rank's files, and not restored by merge. */
typedef struct tps_manifest_skip {
    char *glob;
    uint64_t count; /* tensors it matched, at least 1 */
    char *reason;
} tps_manifest_skip;

/* A serving engine's state-dict entry that is no source tensor (a target's extras:, lib/targets/target.h:
 * vLLM's attention scale buffers): a 0-d F32 constant at the end of every rank's last part. */
typedef struct tps_manifest_extra {
    char *name;
    double value;
} tps_manifest_extra;

typedef struct tps_manifest {
    uint64_t version;
    uint64_t tp;
    char *tool;          /* "tpshard 0.1.0" */
    char *layout_name;   /* "preset:llama" or the layout file path */
    char *layout_text;   /* the YAML the set was cut with */
    char *config_path;   /* the config.json the sizes came from, as given; NULL when none */
    char *config_keys;   /* the keys of it tpshard reads, a compact JSON object; NULL when none */
    char *target;        /* the engine the rank files are laid out for ("vllm", "sglang"); NULL: tpshard */
    char *target_version; /* the engine release the set is for (--target-version); NULL: the current one */
    tps_manifest_extra *extras; /* with a target: its extras, in file order */
    /* 0 or 1: every rank's files hold every tensor.  P > 1: a TP x PP grid (lib/set/grid.h):
     * stage p holds layers [pp_first[p], pp_first[p+1]); each tensor and file names its stage,
     * a rank's parts are its stages' parts in stage order. */
    uint64_t pp;
    uint64_t *pp_first;
    size_t nextras;
    tps_source_info source;
    tps_manifest_skip *skipped; /* "skipped": the skip: entries that matched, in layout order */
    size_t nskipped;
    tps_manifest_tensor *tensors; /* in the order they appear in each rank's files */
    size_t ntensors;
    tps_manifest_file *files; /* sorted by (rank, part) */
    size_t nfiles;
    /* NULL: every rank's files are in the directory.  Else a partial set (one node's share,
     * written with --only-rank): held[r], r < tp, says whether rank r's files are there.
     * The files list still names every rank's files with their sizes and CRCs, so the
     * manifests of the nodes' shares differ only in "ranks_held". */
    bool *held;
    /* Read from a set an engine saved itself (lib/targets/adopt.h): no tpshard.json, so no CRC-32 of
     * any tensor or file is known (crc fields 0) and the files carry no tp_rank metadata. */
    bool adopted;
    /* private: names of tensors and files, built by the loader or tps_manifest_index */
    tps_name_hash tensor_names, file_names;
    /* private: a loaded manifest's tensor names and rules live here, not one malloc each (a
     * rule is stored once however many tensors it cut); NULL in a manifest built in memory.
     * A retargeted copy shares the pool (by reference) and its strings.  Where set, those
     * strings are never freed or replaced one by one: code that replaces every tensor's
     * name (lib/registry/megatron_out.c) drops the pool once none is left in it. */
    tps_strpool *strings;
    /* private: where the tensors' partitions live (NULL until the first is set); shared,
     * by reference, with a manifest retargeted from this one. */
    tps_partpool *parts;
} tps_manifest;

/* Reads DIR/tpshard.json strictly: unknown version refused, every field type-checked,
 * partitions re-validated against shapes and tp (tps_partition_check), file names plain
 * (no '/', no '..'), each rank 0..tp-1 present; "ranks_held", when there, ascending
 * ranks below tp, each once, at least one. */
tps_status tps_manifest_load(const char *dir, tps_manifest **out, tps_error *err);
/* Whether dir holds a tpshard.json (a regular file): what makes it a shard set, before the
 * manifest is read. */
bool tps_is_shard_set(const char *dir);
/* The same checks on manifest text already in memory (len bytes); what names it in
 * messages (the fuzz target and tests use it). */
tps_status tps_manifest_parse(const char *text, size_t len, const char *what, tps_manifest **out, tps_error *err);

/* The "skipped" array (glob, count, reason per entry), as the manifest and plan --json write it. */
void tps_manifest_skipped_json(tps_jw *w, const tps_manifest *m);

/* Writes the manifest as pretty JSON into buf (deterministic: same input, same bytes). */
tps_status tps_manifest_to_json(const tps_manifest *m, tps_buf *buf, tps_error *err);

/* Whether m's directory holds every rank's files (held NULL, or every entry true). */
bool tps_manifest_holds_all(const tps_manifest *m);
/* Whether m's directory holds rank r's files. */
bool tps_manifest_holds(const tps_manifest *m, uint64_t r);
/* The ranks held, as ranges: "0-1", "0,3,5-7" (truncated to size). */
void tps_manifest_held_str(const tps_manifest *m, char *out, size_t size);

/* Hashes the tensor and file names (the loader does; a caller that builds a manifest may),
 * refusing a name listed twice.  Call again after changing the arrays. */
tps_status tps_manifest_index(tps_manifest *m, const char *what, tps_error *err);

/* By hash once indexed; a manifest built by hand and never indexed is scanned. */
const tps_manifest_tensor *tps_manifest_find(const tps_manifest *m, const char *name);
const tps_manifest_file *tps_manifest_find_file(const tps_manifest *m, const char *name);

/* The "skipped" entry whose glob matches name (a tensor of the source the split left out),
 * or NULL. */
const tps_manifest_skip *tps_manifest_skipped(const tps_manifest *m, const char *name);

/* Points t, a tensor of m, at m's pooled copy of p (p itself may be anywhere). */
tps_status tps_manifest_set_part(tps_manifest *m, tps_manifest_tensor *t, const tps_partition *p, tps_error *err);
/* t's partition with pad_multiple q (a serving engine's or Megatron's vocabulary quantum),
 * when t is padded and split; any other t is left as it is. */
tps_status tps_manifest_set_pad_multiple(tps_manifest *m, tps_manifest_tensor *t, uint64_t q, tps_error *err);

/* Bytes of rank r's slice of tensor i (padding included: it is in the rank's tensor). */
tps_status tps_manifest_rank_bytes(const tps_manifest *m, size_t i, uint64_t r, uint64_t *out, tps_error *err);

void tps_manifest_free(tps_manifest *m);

#endif
