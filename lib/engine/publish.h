/* The last step of split, reshard and merge-to-shards: write tpshard.json into the
 * temporary directory (temp name, fsync, rename: the manifest is the last file to appear)
 * and move the directory into place. */
#ifndef TPS_PUBLISH_H
#define TPS_PUBLISH_H

#include "../set/manifest.h"
#include "outdir.h"

/* On success od has been committed (the caller still frees it). */
tps_status tps_publish_shardset(const tps_manifest *m, tps_outdir *od, tps_error *err);

/* Writes len bytes to path atomically (temp sibling, fsync, rename). */
tps_status tps_write_file_atomic(const char *path, const void *data, size_t len, tps_error *err);

#endif
