/* Atomic output directories.  A shard set only ever becomes visible complete:
 *   1. tps_outdir_begin creates DIR's sibling ".NAME.tpshard-tmp.PID" (mode 0755);
 *   2. the caller writes its files into od->tmp (each via a temp name + fsync + rename);
 *   3. tps_outdir_commit fsyncs the temp directory, renames it onto DIR and fsyncs DIR's
 *      parent; the manifest was written last, inside the temp directory.
 * tps_outdir_abort (or a signal: see tps_outdir_interrupted) removes the temp directory.
 * A leftover temp directory from a killed run has no manifest, so `check` never accepts
 * it, and tps_outdir_begin removes leftovers whose PID is no longer alive.
 * DIR must not exist, or be an empty directory.  With force a non-empty DIR is replaced
 * (renamed aside, the new set renamed in, the old one removed), but only when it is what
 * this kind of output writes: a shard set (tpshard.json and only the files its manifest
 * lists, plus their indexes), or a checkpoint merge wrote (model.safetensors,
 * model-NNNNN-of-NNNNN.safetensors, model.safetensors.index.json).  Anything else is refused
 * naming the first foreign entry, and left untouched.  When the new set cannot be renamed in,
 * the old one is renamed back, or the error says where it was left.
 *
 * A file output (merge -o FILE.safetensors) is the same with one file: it is written into
 * the temporary directory under its own name and renamed onto FILE, which, when it exists,
 * must be a regular file and force must be given.
 *
 * A source that changes while it is read must never yield a shard set: tps_outdir_begin
 * records the identity (device, inode, size, modification time) of every input file (for a
 * directory input, or a *.index.json, the checkpoint files beside it: *.safetensors, *.bin,
 * *.pt, *.pth, *.npy, *.npz, *.json), and tps_outdir_commit refuses, with TPS_EIO naming
 * the file and what changed, when any of them differs before the rename.  A source that
 * shrank mid-read usually fails earlier, at the short read. */
#ifndef TPS_OUTDIR_H
#define TPS_OUTDIR_H

#include <stdbool.h>
#include <stddef.h>

#include "../base/status.h"
#include "outdir_nested.h" /* the tracker's name, which the guards look for */

typedef struct tps_outdir_src tps_outdir_src;

typedef enum tps_outdir_kind {
    TPS_OUT_SHARDSET,   /* a directory: a shard set */
    TPS_OUT_CHECKPOINT, /* a directory: a Hugging Face checkpoint (merge) */
    TPS_OUT_FILE        /* one file (merge -o FILE.safetensors) */
} tps_outdir_kind;

typedef struct tps_outdir {
    char *final; /* DIR (or FILE) as given */
    char *tmp;   /* the temporary directory being filled */
    char *file;  /* TPS_OUT_FILE: FILE's base name, the one file written into tmp; else NULL */
    bool force;
    tps_outdir_src *srcs; /* input identities, checked again by commit */
    size_t nsrcs;
} tps_outdir;

/* Refuses DIR when it is, contains, or lies inside any of the inputs (NULL-terminated),
 * and a non-empty DIR unless force is given and it is replaceable (above). */
tps_status tps_outdir_begin(const char *dir, tps_outdir_kind kind, bool force, const char *const *inputs,
                            tps_outdir **out, tps_error *err);
/* Path of name inside the temporary directory (malloc'd), or NULL when out of memory. */
char *tps_outdir_path(const tps_outdir *od, const char *name);
tps_status tps_outdir_commit(tps_outdir *od, tps_error *err);
void tps_outdir_abort(tps_outdir *od); /* accepts NULL; frees od */
void tps_outdir_free(tps_outdir *od);  /* after commit */

/* SIGINT/SIGTERM/SIGHUP set a flag instead of killing the process, so long operations can
 * stop between chunks and clean up.  tps_outdir_interrupted returns the signal number
 * (0 when none); callers fail with a message naming it. */
void tps_signals_install(void);
int tps_outdir_interrupted(void);

/* rm -rf of a directory tree we created (does not follow symlinks). */
void tps_remove_tree(const char *path);

#endif
