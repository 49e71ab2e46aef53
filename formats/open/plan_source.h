/* What split and plan do before they cut: a checkpoint opened with its layout loaded (a
 * --layout file or a preset), its sizes read from config.json (the one given, the one beside
 * it, or a Megatron checkpoint's own) and inferred from its tensors, and planned at a tp,
 * every problem at once.  The command line (cmd/layout_args.c) chooses the preset and prints
 * what this returns: the refusal grouped by cause, the layout rules that matched no tensor,
 * the line naming the preset config.json asks for, the Marlin note. */
#ifndef TPS_PLAN_SOURCE_H
#define TPS_PLAN_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../lib/base/buf.h"
#include "../../lib/base/index.h"
#include "../../lib/layout/layout.h"
#include "../../lib/refusal/problems.h"
#include "../../lib/set/manifest.h"

struct tps_megatron_as_hf; /* lib/registry/megatron_as_hf.h */

/* The config.json beside src (in it when src is a directory, "src/" or not; beside it when a
 * file), written into path; whether it is there, a regular file. */
bool tps_plan_config_beside(const char *src, char *path, size_t size);

typedef struct tps_plan_source_in {
    const char *src;
    const char *layout;       /* --layout FILE, or NULL: the preset */
    const char *preset;       /* the preset's own name (tps_preset_resolve, tps_preset_detect) */
    bool preset_given;        /* --preset named it (not config.json, not a Megatron checkpoint's args) */
    const char *config;       /* the config.json to read, or NULL */
    struct tps_megatron_as_hf *mg; /* a Megatron checkpoint opened as Hugging Face, or NULL: owned from here */
    uint64_t tp;
} tps_plan_source_in;

typedef struct tps_plan_source {
    tps_index *ix;            /* the caller's to free, each set as far as the run got */
    tps_layout *l;
    tps_manifest *m;
    tps_problems problems;    /* on a refusal: every refused tensor, grouped by cause */
    tps_buf unused;           /* the layout's rules that matched no tensor, a line each */
    tps_buf note;             /* the Marlin note, or empty */
    char other_preset[2048];  /* --preset fits no tensor and config.json names another: the line saying so */
} tps_plan_source;

/* Opens, loads and plans as above; the manifest keeps the config.json keys the sizes came
 * from and its path (verify then needs no config.json).  Release out with
 * tps_plan_source_release, whatever this returns. */
tps_status tps_plan_source_open(const tps_plan_source_in *in, tps_plan_source *out, tps_error *err);
/* Frees what tps_plan_source_open built but ix, l and m. */
void tps_plan_source_release(tps_plan_source *out);

#endif
