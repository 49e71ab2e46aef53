/* Targets: one registry.  Every convention a set is written or read in is one entry of one
 * table (registry.c): tpshard's own sets (the default), the serving engines' sharded_state
 * sets (vllm, sglang), Megatron-LM checkpoints (megatron) and the Hugging Face model merged
 * from one (hf).  An entry says what the target can write and read (pipeline and expert
 * grids, checkpoint formats such as Megatron's torch_dist, release classes), its file naming,
 * the layout section that maps its names, and whether sets it saved itself are adopted.
 * cmd/ looks a target up by name and asks the entry; nothing else compares a target's name.
 *
 * Where the code lives (the layer order, Makefile LIB_LAYERS: ... targets engine registry):
 * this folder comes after engine, because Megatron's planning (megatron_*.h here: its args,
 * the Hugging Face <-> Megatron mapping, the split and reshard plans, its file plans) builds
 * on the engine's cut and write step.  The vLLM and SGLang schemas and adoption stay in
 * lib/targets/, below engine, because the engine reads them while it cuts and reads sets
 * (fusion, blocked rows, extras): an entry names its schema (the key under the layout's
 * targets:), and the loader there reads the section it is handed, so no arrow runs up.  Both
 * kinds of section (targets: vllm: and targets: megatron:) are read with one walker,
 * lib/targets/target_section.h.  What needs a file format (the torch and DCP writers, the
 * Megatron reader) is in formats/megatron/megatron_target.h, since lib/ includes no format. */
#ifndef TPS_REGISTRY_H
#define TPS_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/status.h"

/* What an entry can do. */
enum {
    TPS_TARGET_DEFAULT = 1u << 0,    /* what split and reshard write without --target */
    TPS_TARGET_SET = 1u << 1,        /* a shard set with tpshard.json: split/reshard --target NAME */
    TPS_TARGET_RELEASES = 1u << 2,   /* release classes: --target-version */
    TPS_TARGET_PP = 1u << 3,         /* pipeline stages: --pp, --pp-layers */
    TPS_TARGET_EP = 1u << 4,         /* experts whole per rank: --ep */
    TPS_TARGET_CHECKPOINT = 1u << 5, /* its own checkpoint files: split and reshard take its path */
    TPS_TARGET_MERGE = 1u << 6,      /* merge --target NAME: a checkpoint merged into this form */
    TPS_TARGET_ADOPT = 1u << 7,      /* sets it saved itself are read: the adopter, lib/targets/adopt.h, below
                                        this table, runs the vllm schema backwards and checks sglang's */
};

typedef struct tps_target_entry {
    const char *name;           /* --target NAME */
    unsigned caps;              /* TPS_TARGET_* */
    const char *schema;         /* the layout's targets: key mapping its names; NULL: the source's names */
    const char *files;          /* its rank files' names (the write step's template) */
    const char *const *formats; /* --ckpt-format values, the default first; NULL: none */
    const char *what;           /* a phrase for messages */
} tps_target_entry;

/* The --ckpt-format values of the entry with TPS_TARGET_CHECKPOINT, by index in its formats. */
enum { TPS_CKPT_TORCH = 0, TPS_CKPT_TORCH_DIST = 1 };

/* The entry named name, or NULL (name NULL: the default entry). */
const tps_target_entry *tps_target_find(const char *name);

/* The first entry with every cap of caps (the one that takes a path of its own), or NULL. */
const tps_target_entry *tps_target_with(unsigned caps);

/* Whether the target named name (NULL: the default) has every cap of caps; an unknown name
 * has none. */
bool tps_target_can(const char *name, unsigned caps);

/* The entry named name when it has every cap of caps; else NULL, failing TPS_EARG
 * "--target 'NAME': expected A, B or C" with the names that have them. */
const tps_target_entry *tps_target_lookup(const char *name, unsigned caps, tps_error *err);

/* "A, B or C": the names of the entries with every cap of caps, in the table's order. */
const char *tps_target_names(unsigned caps, char *buf, size_t size);

/* The index of v among e's formats (v NULL: 0, the default), or -1 for another value. */
int tps_target_format(const tps_target_entry *e, const char *v);

#endif
