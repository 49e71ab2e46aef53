/* Atomic output directories.  A shard set only ever becomes visible complete:
 *   1. tps_outdir_begin creates DIR's sibling ".NAME.tpshard-tmp.PID" (mode 0755);
 *   2. the caller writes its files into od->tmp (each via a temp name + fsync + rename);
 *   3. tps_outdir_commit fsyncs the temp directory, renames it onto DIR and fsyncs DIR's
 *      parent; the manifest was written last, inside the temp directory.
 * tps_outdir_abort (or a signal: see tps_outdir_interrupted) removes the temp directory.
 * A leftover temp directory from a killed run has no manifest, so `check` never accepts
 * it, and tps_outdir_begin removes leftovers whose PID is no longer alive.
 * DIR must not exist, or be an empty directory; with force a non-empty DIR is replaced
 * (renamed aside, the new set renamed in, the old one removed).
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

#include "status.h"

typedef struct tps_outdir_src tps_outdir_src;

typedef struct tps_outdir {
    char *final; /* DIR as given */
    char *tmp;   /* the temporary directory being filled */
    bool force;
    tps_outdir_src *srcs; /* input identities, checked again by commit */
    size_t nsrcs;
} tps_outdir;

/* Refuses DIR when it is, contains, or lies inside any of the inputs (NULL-terminated). */
tps_status tps_outdir_begin(const char *dir, bool force, const char *const *inputs, tps_outdir **out, tps_error *err);
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
